package shm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	mmap "github.com/edsrzf/mmap-go"
	"golang.org/x/sys/unix"

	"github.com/ctxd/ctxd/internal/privdir"
)

// lockDir takes an exclusive flock on the arena folder itself (no lock
// file that could be deleted or replaced under its holder). flock belongs
// to the open file description, so a second Open fails even inside the
// same process, and the kernel drops the lock when the holder dies (no
// stale lock after kill -9).
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("shm: lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, fmt.Errorf("shm: lock %s: %w", dir, err)
	}
	return f, nil
}

// prepareDir creates dir (and its parents) with mode 0700 and tightens an
// existing dir to 0700, refusing a symbolic link or a folder another uid
// owns (ErrUnsafeFolder) without touching it.
func prepareDir(dir string) error {
	if err := privdir.Ensure(dir); err != nil {
		return fmt.Errorf("shm: arena folder: %w", err)
	}
	return nil
}

// removeTemps deletes half-created files (*.tmp) a killed process left.
// Only called with the lock held, so none of them is in use.
func removeTemps(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), tmpSuffix) &&
			(strings.HasPrefix(e.Name(), superName) || strings.HasPrefix(e.Name(), "region-")) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// setAside moves path into DIR/quarantine/ as <name>.<tag>-<timestamp>.
func setAside(dir, path string, cause error) SetAsideFile {
	q := filepath.Join(dir, quarantineName)
	rec := SetAsideFile{Path: path, Err: cause}
	if err := privdir.Ensure(q); err != nil {
		rec.Err = errors.Join(cause, fmt.Errorf("quarantine: %w", err))
		os.Remove(path) // never leave it where Open would read it again
		return rec
	}
	tag := "corrupt"
	if errors.Is(cause, ErrForeign) {
		tag = "foreign"
	}
	base := fmt.Sprintf("%s.%s-%s", filepath.Base(path), tag, time.Now().UTC().Format("20060102T150405.000000000Z"))
	dst := filepath.Join(q, base)
	for i := 1; ; i++ {
		if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
			break
		}
		dst = filepath.Join(q, fmt.Sprintf("%s.%d", base, i))
	}
	if err := os.Rename(path, dst); err != nil {
		rec.Err = errors.Join(cause, fmt.Errorf("quarantine: %w", err))
		os.Remove(path)
		return rec
	}
	rec.MovedTo = dst
	return rec
}

// createFile creates path via path.tmp: the file is sized with fallocate
// (so writes through the mapping cannot hit ENOSPC and SIGBUS later; falls
// back to ftruncate where fallocate is unsupported), filled with hdr at
// offset 0, and renamed into place, so that path either does not exist or
// is complete.
func createFile(path string, size int64, hdr []byte, sync bool) error {
	tmp := path + tmpSuffix
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
			return fail(fmt.Errorf("fallocate %d bytes: %w", size, err))
		}
		if err := f.Truncate(size); err != nil {
			return fail(err)
		}
	}
	if _, err := f.WriteAt(hdr, 0); err != nil {
		return fail(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			return fail(err)
		}
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	if sync {
		syncDir(filepath.Dir(path))
	}
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// mapFile opens path read-write, forces mode 0600 and maps it shared.
// size is the length the caller expects; a file of another size is an
// error (the caller sets it aside).
func mapFile(path string, size int64) (*os.File, mmap.MMap, error) {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %s is not a regular file", ErrCorrupt, path)
	}
	if size >= 0 && st.Size() != size {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %s is %d bytes, want %d", ErrCorrupt, path, st.Size(), size)
	}
	if st.Mode().Perm() != 0o600 {
		if err := f.Chmod(0o600); err != nil {
			f.Close()
			return nil, nil, err
		}
	}
	if st.Size() == 0 {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %s is empty", ErrCorrupt, path)
	}
	m, err := mmap.Map(f, mmap.RDWR, 0)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, m, nil
}

// msyncRange writes the pages of m covering [off, off+n) back to the file
// and waits for it (MS_SYNC). Only used with Options.Sync.
func msyncRange(m mmap.MMap, off, n int64) error {
	if n <= 0 {
		return nil
	}
	page := int64(os.Getpagesize())
	start := off / page * page
	end := min((off+n+page-1)/page*page, int64(len(m)))
	return unix.Msync(m[start:end], unix.MS_SYNC)
}
