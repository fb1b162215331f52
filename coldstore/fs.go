package coldstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ctxd/ctxd/internal/privdir"
)

// fileOps is the seam through which every write-side system call of a
// Store goes, so tests can inject ENOSPC and EIO. Reads do not go through
// it. realFileOps is the only implementation outside tests.
type fileOps struct {
	write   func(f *os.File, p []byte) (int, error)
	sync    func(f *os.File) error
	rename  func(oldPath, newPath string) error
	syncDir func(dir string) error
}

func realFileOps() *fileOps {
	return &fileOps{
		write:   func(f *os.File, p []byte) (int, error) { return f.Write(p) },
		sync:    func(f *os.File) error { return f.Sync() },
		rename:  os.Rename,
		syncDir: syncDir,
	}
}

// syncDir fsyncs a folder, making renames and creations in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// tmpSuffix ends every temporary file name; Open removes such files.
const tmpSuffix = ".tmp"

// writeAtomic writes parts to a temporary file in dir, fsyncs it, renames
// it to dir/name and fsyncs dir. On any error the temporary file (and,
// when only the final folder sync failed, the renamed file) is removed,
// so a failed write leaves nothing behind. It returns the bytes written.
func writeAtomic(ops *fileOps, dir, name string, parts ...[]byte) (int64, error) {
	f, err := os.CreateTemp(dir, "."+name+".*"+tmpSuffix) // mode 0600
	if err != nil {
		return 0, err
	}
	tmp := f.Name()
	fail := func(err error) (int64, error) {
		f.Close()
		os.Remove(tmp)
		return 0, err
	}
	var n int64
	for _, p := range parts {
		for len(p) > 0 {
			w, err := ops.write(f, p)
			n += int64(w)
			if err != nil {
				return fail(err)
			}
			if w == 0 {
				return fail(fmt.Errorf("write %s: %w", tmp, syscall.EIO))
			}
			p = p[w:]
		}
	}
	if err := ops.sync(f); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return 0, err
	}
	final := filepath.Join(dir, name)
	if err := ops.rename(tmp, final); err != nil {
		os.Remove(tmp)
		return 0, err
	}
	if err := ops.syncDir(dir); err != nil {
		os.Remove(final)
		return 0, err
	}
	return n, nil
}

// isDiskFault reports whether err means the disk cannot take writes now:
// full (ENOSPC, EDQUOT), failing (EIO) or read-only (EROFS). Such errors
// make the store stand aside; others fail only the write at hand.
func isDiskFault(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EROFS)
}

// isDiskFull reports whether err means out of space (freeing space may
// cure it, so GC and removals end the back-off early).
func isDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// lockDir takes an exclusive, non-blocking flock on root/lock.
func lockDir(root string) (*os.File, error) {
	f, err := privdir.OpenFile(filepath.Join(root, "lock"))
	if err != nil {
		return nil, fmt.Errorf("coldstore: lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, root)
		}
		return nil, fmt.Errorf("coldstore: lock %s: %w", root, err)
	}
	return f, nil
}

// moveAside renames path into quarDir as <path relative to root, with /
// as _>.<kind>-<UTC time>, never overwriting an earlier one, and fsyncs
// both folders. It returns the new path.
func moveAside(root, quarDir, path, kind string) (string, error) {
	rel, err := filepath.Rel(root, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		rel = filepath.Base(path)
	}
	base := strings.ReplaceAll(rel, string(filepath.Separator), "_") + "." + kind + "-" +
		time.Now().UTC().Format("20060102T150405.000000000Z")
	dst := filepath.Join(quarDir, base)
	for i := 1; ; i++ {
		if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
			break
		}
		dst = filepath.Join(quarDir, fmt.Sprintf("%s.%d", base, i))
	}
	if err := os.Rename(path, dst); err != nil {
		return "", err
	}
	syncDir(quarDir)
	syncDir(filepath.Dir(path))
	return dst, nil
}
