package privdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrUnsafe reports a private folder that is a symbolic link, not a
// folder, or owned by another user.
var ErrUnsafe = errors.New("unsafe private folder")

// Ensure makes dir a folder of the effective uid with mode 0700: it
// creates it (and missing parents) when absent, refuses a symbolic link,
// a non-folder or another user's folder, and tightens the mode of a
// folder it owns.
func Ensure(dir string) error {
	if parent := filepath.Dir(dir); parent != dir {
		if err := os.MkdirAll(parent, 0o700); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return refusal(dir, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	if uid := uint32(os.Geteuid()); st.Uid != uid {
		return fmt.Errorf("%w: %s is owned by uid %d, not by uid %d that runs ctxd: remove it or choose another folder", ErrUnsafe, dir, st.Uid, uid)
	}
	if st.Mode&0o7777 != 0o700 {
		if err := unix.Fchmod(fd, 0o700); err != nil {
			return fmt.Errorf("%s: chmod 0700: %w", dir, err)
		}
	}
	return nil
}

// refusal explains why dir could not be opened as a folder.
func refusal(dir string, err error) error {
	// O_NOFOLLOW|O_DIRECTORY on a link gives ELOOP or ENOTDIR: ask lstat.
	if st, lerr := os.Lstat(dir); lerr == nil && st.Mode()&os.ModeSymlink != 0 {
		err = unix.ELOOP
	}
	switch {
	case errors.Is(err, unix.ELOOP):
		target, _ := os.Readlink(dir)
		return fmt.Errorf("%w: %s is a symbolic link (to %q); ctxd never follows links for its private folders", ErrUnsafe, dir, target)
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%w: %s is not a folder", ErrUnsafe, dir)
	}
	return fmt.Errorf("%s: %w", dir, err)
}
