package sidecar

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/testmodel"
)

// linkedDir makes base/name a symbolic link to a fresh 0755 folder and
// returns the folder.
func linkedDir(t *testing.T, base, name string) string {
	t.Helper()
	target := filepath.Join(t.TempDir(), "etc")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(base, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(base, name)); err != nil {
		t.Fatal(err)
	}
	return target
}

func untouched(t *testing.T, dir string) {
	t.Helper()
	st, _ := os.Stat(dir)
	ents, _ := os.ReadDir(dir)
	if st.Mode().Perm() != 0o755 || len(ents) != 0 {
		t.Fatalf("the link's target %s changed: mode %v, %d entries", dir, st.Mode(), len(ents))
	}
}

// TestSymlinkedArenaRefused: DATA/shm replaced by a link is refused with
// ErrUnsafeFolder; nothing is chmodded or written through it.
func TestSymlinkedArenaRefused(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	target := linkedDir(t, data, "shm")
	_, err := New(context.Background(), Config{Engine: llama.Backend{}, ModelPath: testmodel.Needle(t), HotTokens: 256, ContextTokens: 256, ArenaBytes: 2 << 20,
		NoCold: true, DataDir: data, SocketPath: filepath.Join(t.TempDir(), "s.sock"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if !errors.Is(err, ErrUnsafeFolder) {
		t.Fatalf("symlinked arena folder: %v, want ErrUnsafeFolder", err)
	}
	untouched(t, target)
}

// TestSymlinkedColdDirRefused: DATA/cold replaced by a link leaves the SSD
// tier off with the reason; nothing is written through it.
func TestSymlinkedColdDirRefused(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	target := linkedDir(t, data, "cold")
	ts := startServer(t, Config{DataDir: data})
	st, err := dial(t, ts).Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Cold.Enabled || !strings.Contains(st.Cold.Unavailable, "symbolic link") {
		t.Fatalf("SSD tier through a symlink: %v", st.Cold)
	}
	untouched(t, target)
}
