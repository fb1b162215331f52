// Package privdir creates and checks the folders ctxd keeps to itself (the
// host-RAM arena, the SSD tier, the socket's folder) without ever following
// a symbolic link or taking over a folder another user owns.
//
// Invariants:
//   - The last component of a private folder is never a symbolic link: it
//     is opened with O_NOFOLLOW|O_DIRECTORY, so a link planted there (to
//     /etc, say) is refused, never chmodded or written into.
//   - A folder is only used, and its mode only tightened, when it is owned
//     by the effective uid; the mode is changed on the opened descriptor
//     (fchmod), so the folder checked is the folder changed.
//   - Refusals wrap ErrUnsafe and name the path and the reason.
package privdir
