package coldstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestOpenRefusesLinkedSubfolders: a symbolic link at blocks/, snapshots/
// or quarantine/ is refused and its target's files stay where they are.
// Before, the store read the target folder and moved its files into its
// quarantine.
func TestOpenRefusesLinkedSubfolders(t *testing.T) {
	for _, sub := range []string{"blocks", "snapshots", "quarantine"} {
		t.Run(sub, func(t *testing.T) {
			base := t.TempDir()
			target := filepath.Join(base, "precious")
			os.Mkdir(target, 0o755)
			for _, n := range []string{"a.txt", "ab"} {
				if err := os.WriteFile(filepath.Join(target, n), []byte("keep me"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			root := filepath.Join(base, "cold")
			os.Mkdir(root, 0o700)
			if err := os.Symlink(target, filepath.Join(root, sub)); err != nil {
				t.Fatal(err)
			}
			s, _, err := Open(context.Background(), Config{Dir: root})
			if err == nil {
				s.Close()
			}
			if !errors.Is(err, ErrUnsafeFolder) {
				t.Errorf("%s/ as a link: %v, want ErrUnsafeFolder", sub, err)
			}
			ents, _ := os.ReadDir(target)
			if len(ents) != 2 {
				t.Errorf("the link's target holds %d entries, want its 2 files untouched", len(ents))
			}
			if st, _ := os.Stat(target); st.Mode().Perm() != 0o755 {
				t.Errorf("the target's mode changed to %v", st.Mode())
			}
		})
	}
}
