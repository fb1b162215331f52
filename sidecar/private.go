package sidecar

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
)

// Private is a ctxd served from inside another program (ctxbench's
// benchmarks and evaluations, tests): a real Server on its own socket and data
// directory, reached through the real protocol.
type Private struct {
	Server *Server
	Socket string
	dir    string
	cancel context.CancelFunc
	done   chan error
}

// StartPrivate starts a server in the background. Unset SocketPath and
// DataDir go to a fresh temporary folder that Stop removes; an unset
// Logger discards logs.
func StartPrivate(cfg Config) (*Private, error) {
	dir, err := os.MkdirTemp("", "ctxd-private-")
	if err != nil {
		return nil, err
	}
	if cfg.SocketPath == "" {
		cfg.SocketPath = filepath.Join(dir, "ctxd.sock")
	}
	if cfg.DataDir == "" {
		cfg.DataDir = filepath.Join(dir, "data")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv, err := New(context.Background(), cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ln, err := srv.Listen()
	if err != nil {
		srv.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Private{Server: srv, Socket: cfg.SocketPath, dir: dir, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- srv.Serve(ctx, ln) }()
	return p, nil
}

// Done delivers Serve's result once it returns.
func (p *Private) Done() <-chan error { return p.done }

// Stop ends the server and removes its temporary folder.
func (p *Private) Stop() {
	p.cancel()
	<-p.done
	p.Server.Close()
	os.RemoveAll(p.dir)
}
