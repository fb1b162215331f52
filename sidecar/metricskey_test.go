package sidecar

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/ctxd/ctxd/engine/llama"
)

func metricsServer(t *testing.T, addr, key string) (*Server, func() error) {
	t.Helper()
	dir := t.TempDir()
	srv, err := New(context.Background(), Config{Engine: llama.Backend{}, SocketPath: filepath.Join(dir, "s.sock"), DataDir: filepath.Join(dir, "data"),
		NoCold: true, MetricsAddr: addr, MetricsKey: key, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ln, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ctx, ln) }()
	return srv, func() error { cancel(); return <-errc }
}

// TestMetricsOffLoopbackNeedsKey: /metrics on a non-loopback address
// without an API key is a configuration error; with one, the key is
// required. Before, it was served to anyone.
func TestMetricsOffLoopbackNeedsKey(t *testing.T) {
	_, stop := metricsServer(t, "0.0.0.0:0", "")
	select {
	case err := <-func() chan error { c := make(chan error, 1); go func() { c <- stop() }(); return c }():
		if !errors.Is(err, ErrConfig) {
			t.Errorf("non-loopback metrics without a key: %v, want ErrConfig", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not end")
	}

	srv, stop := metricsServer(t, "127.0.0.1:0", "metrics-key-123")
	defer stop()
	var addr string
	for deadline := time.Now().Add(5 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		addr = srv.MetricsListenAddr()
	}
	for key, want := range map[string]int{"": 401, "wrong": 401, "metrics-key-123": 200} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("key %q: %d, want %d", key, resp.StatusCode, want)
		}
	}
}
