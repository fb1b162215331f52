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
	"github.com/ctxd/ctxd/protocol"
)

// modelless is a server without a model, for tests of its socket.
func modelless(t *testing.T, socket string) *Server {
	t.Helper()
	srv, err := New(context.Background(), Config{Engine: llama.Backend{}, SocketPath: socket, DataDir: filepath.Join(t.TempDir(), "data"), NoCold: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// TestListenKeepsARegularFile: only a stale socket is replaced; a regular
// file at the socket path is refused and left in place.
func TestListenKeepsARegularFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctxd.sock")
	if err := os.WriteFile(path, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := modelless(t, path).Listen()
	if err == nil {
		ln.Close()
		t.Fatal("Listen replaced a regular file")
	}
	if b, _ := os.ReadFile(path); string(b) != "precious" {
		t.Fatalf("the file at the socket path is gone or changed (%q); Listen said %v", b, err)
	}
}

// TestListenRefusesALongPath: a path over the kernel's limit fails with a
// typed error that names the limit.
func TestListenRefusesALongPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 120))
	_, err := modelless(t, filepath.Join(dir, "ctxd.sock")).Listen()
	if !errors.Is(err, protocol.ErrInvalidArgument) || !strings.Contains(err.Error(), "107") {
		t.Fatalf("long socket path: %v, want ErrInvalidArgument naming the limit of 107 bytes", err)
	}
}

// TestListenRefusesASymlinkedFolder: a socket folder replaced by a link is
// refused; its target is not chmodded and gets no socket.
func TestListenRefusesASymlinkedFolder(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "elsewhere")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "ctxd-1000")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	ln, err := modelless(t, filepath.Join(link, "ctxd.sock")).Listen()
	if err == nil {
		ln.Close()
	}
	if !errors.Is(err, ErrUnsafeFolder) {
		t.Fatalf("symlinked socket folder: %v, want ErrUnsafeFolder", err)
	}
	st, _ := os.Stat(target)
	ents, _ := os.ReadDir(target)
	if st.Mode().Perm() != 0o755 || len(ents) != 0 {
		t.Fatalf("the link's target changed: mode %v, %d entries", st.Mode(), len(ents))
	}
}

// TestListenRefusesAnotherUsersFolder: a socket folder another uid
// created first (as /tmp/ctxd-UID can be) is refused, not taken over.
func TestListenRefusesAnotherUsersFolder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a folder owned by another uid")
	}
	dir := filepath.Join(t.TempDir(), "ctxd-0")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	ln, err := modelless(t, filepath.Join(dir, "ctxd.sock")).Listen()
	if err == nil {
		ln.Close()
	}
	if !errors.Is(err, ErrUnsafeFolder) {
		t.Fatalf("another uid's socket folder: %v, want ErrUnsafeFolder", err)
	}
}
