package protocol

import (
	"fmt"
	"os"
	"path/filepath"
)

// MaxSocketPathBytes is the longest Unix socket path the kernel takes:
// sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
const MaxSocketPathBytes = 107

// DefaultSocketPath is $XDG_RUNTIME_DIR/ctxd/ctxd.sock, or
// /tmp/ctxd-UID/ctxd.sock without XDG_RUNTIME_DIR (UID: the caller's
// numeric user id). The daemon refuses a socket folder that is a symbolic
// link or that another uid owns, so another local user cannot pre-create
// /tmp/ctxd-UID for it.
func DefaultSocketPath() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "ctxd", "ctxd.sock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("ctxd-%d", os.Getuid()), "ctxd.sock")
}

// CheckSocketPath refuses a path that no Unix socket can have: empty, or
// longer than MaxSocketPathBytes. The error wraps ErrInvalidArgument and
// names the limit.
func CheckSocketPath(path string) error {
	switch {
	case path == "":
		return fmt.Errorf("%w: empty socket path", ErrInvalidArgument)
	case len(path) > MaxSocketPathBytes:
		return fmt.Errorf("%w: socket path %s is %d bytes; a Unix socket path holds at most %d: choose a shorter one", ErrInvalidArgument, path, len(path), MaxSocketPathBytes)
	}
	return nil
}
