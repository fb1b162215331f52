package coldstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestOpenRefusesSymlinkedFolder: a store folder replaced by a link to
// another folder is refused; the target is neither chmodded nor written.
func TestOpenRefusesSymlinkedFolder(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "etc")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "cold")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	s, _, err := Open(context.Background(), Config{Dir: link})
	if err == nil {
		s.Close()
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
