package privdir

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// OpenFile opens (creating it 0600 when absent) a private file such as a
// lock file, read-write, without following a symbolic link, and checks
// the file opened: a regular file of the effective uid with one link (a
// hard link elsewhere would let ctxd write another file). A group or
// other bit is taken away on the descriptor. Refusals wrap ErrUnsafe.
func OpenFile(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0o600)
	if err != nil {
		if st, lerr := os.Lstat(path); lerr == nil && st.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(path)
			return nil, fmt.Errorf("%w: %s is a symbolic link (to %q); ctxd never follows links for its private files", ErrUnsafe, path, target)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	uid := uint32(os.Geteuid())
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = fmt.Errorf("%w: %s is not a regular file", ErrUnsafe, path)
	case st.Uid != uid:
		err = fmt.Errorf("%w: %s is owned by uid %d, not by uid %d that runs ctxd", ErrUnsafe, path, st.Uid, uid)
	case st.Nlink != 1:
		err = fmt.Errorf("%w: %s has %d hard links; ctxd's private files have one", ErrUnsafe, path, st.Nlink)
	case st.Mode&0o077 != 0:
		if e := unix.Fchmod(fd, 0o600); e != nil {
			err = fmt.Errorf("%s: chmod 0600: %w", path, e)
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}
