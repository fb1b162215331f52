package sidecar

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ctxd/ctxd/internal/privdir"
)

// Errors of the single-owner lease.
var (
	ErrAlreadyRunning = errors.New("another ctxd owns this data directory")
	ErrLeaseLost      = errors.New("ctxd lost ownership of its data directory")
	// ErrUnsafeFolder: a private folder (the socket's, the arena's, the SSD
	// tier's) is a symbolic link, not a folder, or owned by another uid;
	// ctxd refuses it and leaves it untouched.
	ErrUnsafeFolder = privdir.ErrUnsafe
)

// ownerLock is an exclusive flock on DATA_DIR/ctxd.lock. The lock file
// holds the owner's pid for the error a second ctxd prints.
type ownerLock struct {
	path string
	f    *os.File
	ino  uint64
}

func acquireOwner(dataDir string) (*ownerLock, error) {
	// The data directory and its lock file are private: never a symbolic
	// link, never another uid's, the folder 0700 and the file 0600 with a
	// single link (privdir), so ctxd never writes its pid through a link.
	if err := privdir.Ensure(dataDir); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	path := filepath.Join(dataDir, "ctxd.lock")
	f, err := privdir.OpenFile(path)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		holder := strings.TrimSpace(string(b))
		if holder == "" {
			holder = "unknown"
		}
		return nil, fmt.Errorf("%w: %s is locked by pid %s", ErrAlreadyRunning, path, holder)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock file: %w", err)
	}
	return &ownerLock{path: path, f: f, ino: st.Ino}, nil
}

// check verifies that the lock file on disk is still the one we hold; if it
// was removed or replaced another ctxd could take the directory, so the
// owner must fence itself.
func (o *ownerLock) check() error {
	var st unix.Stat_t
	if err := unix.Stat(o.path, &st); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrLeaseLost, o.path, err)
	}
	if st.Ino != o.ino {
		return fmt.Errorf("%w: %s was replaced", ErrLeaseLost, o.path)
	}
	return nil
}

func (o *ownerLock) release() {
	if o.f == nil {
		return
	}
	if o.check() == nil {
		os.Remove(o.path)
	}
	o.f.Close()
	o.f = nil
}
