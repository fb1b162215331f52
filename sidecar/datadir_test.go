package sidecar

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxd/ctxd/engine/llama"
)

func newInDataDir(dataDir string) (*Server, error) {
	return New(context.Background(), Config{Engine: llama.Backend{}, DataDir: dataDir, NoCold: true,
		SocketPath: filepath.Join(filepath.Dir(dataDir), "s.sock"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// TestDataDirLockFileLinkRefused: DATA/ctxd.lock as a symbolic link (or a
// second hard link) to another file is refused and the file keeps its
// content. Before, ctxd wrote its pid into it.
func TestDataDirLockFileLinkRefused(t *testing.T) {
	for _, kind := range []string{"symlink", "hardlink"} {
		t.Run(kind, func(t *testing.T) {
			base := t.TempDir()
			victim := filepath.Join(base, "victim")
			if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			data := filepath.Join(base, "data")
			os.Mkdir(data, 0o700)
			link := os.Symlink
			if kind == "hardlink" {
				link = os.Link
			}
			if err := link(victim, filepath.Join(data, "ctxd.lock")); err != nil {
				t.Fatal(err)
			}
			srv, err := newInDataDir(data)
			if err == nil {
				srv.Close()
			}
			if !errors.Is(err, ErrUnsafeFolder) {
				t.Errorf("ctxd.lock as a %s: %v, want ErrUnsafeFolder", kind, err)
			}
			if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
				t.Errorf("the linked file now holds %q", b)
			}
		})
	}
}

// TestDataDirOfAnotherUIDRefused: a data directory another uid owns is
// refused (needs root to make one). Before, it was used.
func TestDataDirOfAnotherUIDRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give a folder to another uid")
	}
	data := filepath.Join(t.TempDir(), "data")
	os.Mkdir(data, 0o700)
	if err := os.Chown(data, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	srv, err := newInDataDir(data)
	if err == nil {
		srv.Close()
	}
	if !errors.Is(err, ErrUnsafeFolder) {
		t.Errorf("a data directory of uid 65534: %v, want ErrUnsafeFolder", err)
	}
	if ents, _ := os.ReadDir(data); len(ents) != 0 {
		t.Errorf("ctxd wrote into another uid's folder: %d entries", len(ents))
	}
}

// TestDataDirLinkRefused: the data directory itself as a link is refused.
func TestDataDirLinkRefused(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "elsewhere")
	os.Mkdir(target, 0o755)
	data := filepath.Join(base, "data")
	os.Symlink(target, data)
	srv, err := newInDataDir(data)
	if err == nil {
		srv.Close()
	}
	if !errors.Is(err, ErrUnsafeFolder) {
		t.Errorf("a linked data directory: %v, want ErrUnsafeFolder", err)
	}
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Errorf("ctxd wrote through the link: %d entries", len(ents))
	}
}
