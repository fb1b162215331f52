package privdir

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestOpenFileRefusals: a link, a second hard link, a FIFO, a folder and
// another uid's file are refused (without blocking, without writing); a
// fresh path is created 0600.
func TestOpenFileRefusals(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.lock")
	os.Symlink(victim, link)
	hard := filepath.Join(dir, "hard.lock")
	os.Link(victim, hard)
	fifo := filepath.Join(dir, "fifo.lock")
	syscall.Mkfifo(fifo, 0o600)
	folder := filepath.Join(dir, "dir.lock")
	os.Mkdir(folder, 0o700)
	for _, p := range []string{link, hard, fifo, folder} {
		done := make(chan error, 1)
		go func() {
			f, err := OpenFile(p)
			if err == nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || (p != folder && !errors.Is(err, ErrUnsafe)) {
				t.Errorf("%s: %v, want a refusal", filepath.Base(p), err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: OpenFile blocked", filepath.Base(p))
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Errorf("the link's target changed: %q", b)
	}
	fresh := filepath.Join(dir, "ctxd.lock")
	f, err := OpenFile(fresh)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if st, _ := os.Stat(fresh); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode())
	}
	if os.Getuid() == 0 {
		other := filepath.Join(dir, "other.lock")
		os.WriteFile(other, nil, 0o600)
		os.Chown(other, 65534, 65534)
		if _, err := OpenFile(other); !errors.Is(err, ErrUnsafe) {
			t.Errorf("another uid's file: %v, want ErrUnsafe", err)
		}
	}
}
