package shm

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestOpenRefusesSymlinkedFolder: an arena folder replaced by a link to
// another folder is refused; the link's target is neither chmodded nor
// written into.
func TestOpenRefusesSymlinkedFolder(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "etc")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "shm")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	a, _, err := Open(link, small())
	if err == nil {
		a.Close()
	}
	if !errors.Is(err, ErrUnsafeFolder) {
		t.Fatalf("Open through a symlink: %v, want ErrUnsafeFolder", err)
	}
	st, _ := os.Stat(target)
	ents, _ := os.ReadDir(target)
	if st.Mode().Perm() != 0o755 || len(ents) != 0 {
		t.Fatalf("the link's target changed: mode %v, %d entries", st.Mode(), len(ents))
	}
}
