package privdir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnsureCreatesAndTightens(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := Ensure(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(dir); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("mode %v, %v: want 0700", st.Mode(), err)
	}
}

func TestEnsureRefusesSymlinkAndLeavesTargetAlone(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "etc")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "shm")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(link); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("symlink: %v, want ErrUnsafe naming the link", err)
	}
	if st, _ := os.Stat(target); st.Mode().Perm() != 0o755 {
		t.Fatalf("the link's target was changed to %v", st.Mode())
	}
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o600)
	if err := Ensure(file); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("regular file: %v, want ErrUnsafe", err)
	}
}

func TestEnsureRefusesAnotherUsersFolder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a folder owned by another uid")
	}
	dir := filepath.Join(t.TempDir(), "theirs")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(dir); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("another uid's folder: %v, want ErrUnsafe", err)
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o777 {
		t.Fatalf("another uid's folder was chmodded to %v", st.Mode())
	}
}
