package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/sidecar"
)

// private is a ctxd started inside ctxctl for replay and benchmarks: a
// real server on its own socket and data directory, reached through the
// real protocol.
type private struct {
	srv    *sidecar.Server
	socket string
	dir    string
	cancel context.CancelFunc
	done   chan error
}

func startPrivate(model string, ctxTokens int) (*private, error) {
	dir, err := os.MkdirTemp("", "ctxctl-")
	if err != nil {
		return nil, err
	}
	srv, err := sidecar.New(sidecar.Config{
		ModelPath: model, ContextTokens: ctxTokens,
		SocketPath: filepath.Join(dir, "ctxd.sock"), DataDir: filepath.Join(dir, "data"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Version: "ctxctl-private",
	})
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
	p := &private{srv: srv, socket: filepath.Join(dir, "ctxd.sock"), dir: dir, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- srv.Serve(ctx, ln) }()
	return p, nil
}

func (p *private) stop() {
	p.cancel()
	<-p.done
	p.srv.Close()
	os.RemoveAll(p.dir)
}

// connect dials --socket, or starts a private daemon when model is set.
func (e *env) connect(ctx context.Context, model string, ctxTokens int) (*client.Client, func(), error) {
	if model == "" {
		c, err := e.dial(ctx)
		if err != nil {
			return nil, nil, err
		}
		return c, func() { c.Close() }, nil
	}
	p, err := startPrivate(model, ctxTokens)
	if err != nil {
		return nil, nil, fmt.Errorf("private daemon: %w", err)
	}
	c, err := client.Dial(ctx, p.socket, client.Options{Name: "ctxctl"})
	if err != nil {
		p.stop()
		return nil, nil, err
	}
	return c, func() { c.Close(); p.stop() }, nil
}
