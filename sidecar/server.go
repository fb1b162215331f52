package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/internal/acceptloop"
	"github.com/ctxd/ctxd/internal/privdir"
	"github.com/ctxd/ctxd/protocol"
	"github.com/ctxd/ctxd/sidecar/internal/resume"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Server is the ctxd daemon.
type Server struct {
	cfg     Config
	log     *slog.Logger
	owner   *ownerLock
	slot    *slot
	started time.Time

	mu          sync.Mutex // guards the fields below
	sessions    map[uint64]*session
	nextSession uint64
	lastSession uint64
	conns       map[uint64]*conn
	nextConn    uint64
	listener    net.Listener
	modelChange []func(context.Context) // OnModelChange's hooks

	metrics *metrics              // counters, gauges and timings (metrics.go)
	fence   atomic.Pointer[error] // set when the lease is lost
	wg      sync.WaitGroup        // connections

	tiers *tiers.Tiers  // the arena and the SSD tier (package tiers)
	snaps *resume.Owner // snapshots and resume (package resume; wired in snapshots.go)
}

// New takes ownership of the data directory, opens the SSD tier, reads
// its snapshot index and loads the configured model; ctx bounds all of it
// (the model file itself is mapped in one step that ctx cannot interrupt).
// It fails with ErrAlreadyRunning when another ctxd owns the directory.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if cfg.Engine == nil {
		return nil, fmt.Errorf("%w: no engine (Config.Engine; ctxd passes engine/llama's Backend)", ErrConfig)
	}
	owner, err := acquireOwner(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	srv := &Server{
		cfg: cfg, log: cfg.Logger, owner: owner, started: time.Now(),
		sessions: map[uint64]*session{}, conns: map[uint64]*conn{},
	}
	srv.metrics = newMetrics(srv.sessionCount)
	srv.tiers = tiers.New(cfg.Logger, srv.metrics, cfg.Engine.BlobCodec())
	srv.tiers.OnCapacityChange(srv.publishSlot) // an arena that cannot grow shows its real capacity
	srv.slot = newSlot(cfg.Logger, srv.tiers)
	srv.snaps = resume.New(srv.snapsEnv())
	srv.tiers.OpenSSD(ctx, cfg.ssdConfig())
	srv.snaps.LoadIndex(ctx)
	if cfg.ModelPath != "" {
		if err := srv.loadLocked(ctx, cfg.ModelPath, cfg.ContextTokens); err != nil {
			srv.tiers.Close(ctx)
			owner.release()
			return nil, err
		}
	}
	return srv, nil
}

// Listen creates the socket: its folder 0700 (never a symbolic link,
// never another uid's folder), the socket 0600. A stale socket is
// replaced; a live one (another server answers) is an error, and so is
// anything at the path that is not a socket: it is left in place.
func (srv *Server) Listen() (net.Listener, error) {
	path := srv.cfg.SocketPath
	if err := protocol.CheckSocketPath(path); err != nil {
		return nil, err
	}
	if err := privdir.Ensure(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("socket folder: %w", err)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("%w: %s exists and is not a socket (%v); ctxd removes only stale sockets", ErrConfig, path, st.Mode().Type())
		}
		if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
			c.Close()
			return nil, fmt.Errorf("%w: a server already answers on %s", ErrAlreadyRunning, path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("stale socket: %w", err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	return ln, nil
}

// Serve accepts connections on ln until ctx ends or the lease is lost.
func (srv *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv.mu.Lock()
	srv.listener = ln
	srv.mu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go srv.watchLease(ctx, cancel)
	go srv.idleSnapshots(ctx)
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	if err := srv.serveMetricsHTTP(ctx); err != nil {
		return err
	}
	srv.log.Info("serving", "socket", ln.Addr().String(), "data_dir", srv.cfg.DataDir)
	// Out of descriptors (EMFILE, ENFILE) and the like pass: the loop
	// backs off and goes on, it never exits for them.
	backoff := acceptloop.Backoff{Log: srv.log, What: "unix socket"}
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				srv.closeConns()
				srv.wg.Wait()
				if cause := context.Cause(ctx); errors.Is(cause, ErrLeaseLost) {
					return cause
				}
				return nil
			}
			if acceptloop.Temporary(err) && backoff.Wait(err, ctx.Done()) {
				srv.metrics.acceptErrors.Inc()
				continue
			}
			if ctx.Err() != nil {
				continue // the loop's exit above
			}
			return err
		}
		backoff.Reset()
		srv.wg.Add(1)
		go func() {
			defer srv.wg.Done()
			srv.serveConn(ctx, nc)
		}()
	}
}

// watchLease fences the server when its lock file disappears or changes.
func (srv *Server) watchLease(ctx context.Context, cancel context.CancelCauseFunc) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := srv.owner.check(); err != nil {
				srv.fence.Store(&err)
				srv.log.Error("fencing: ownership lost, refusing all calls", "err", err)
				cancel(err)
				return
			}
		}
	}
}

func (srv *Server) fenced() error {
	if p := srv.fence.Load(); p != nil {
		return fmt.Errorf("%w: %w", protocol.ErrInternal, *p)
	}
	return nil
}

// Close is Shutdown without a deadline.
func (srv *Server) Close() error { return srv.Shutdown(context.Background()) }

// Shutdown ends every connection and session (their automatic snapshots
// are written), closes the SSD tier, frees the model and releases
// ownership of the data directory. When ctx ends first it stops waiting:
// snapshots and blocks not yet written are given up, the model is left to
// the process's exit, ownership is released and ctx's error returned.
func (srv *Server) Shutdown(ctx context.Context) error {
	srv.closeConns()
	wait := func(wg *sync.WaitGroup) error {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := wait(&srv.wg)
	if err == nil {
		srv.mu.Lock()
		all := make([]*session, 0, len(srv.sessions))
		for _, s := range srv.sessions {
			all = append(all, s)
		}
		srv.mu.Unlock()
		for _, s := range all {
			if e := srv.dropSession(ctx, s); e != nil {
				srv.log.Warn("shutdown: closing session", "session", s.id, "err", e)
				err = e
				break
			}
		}
	}
	if err == nil {
		// Automatic snapshots of the sessions just closed finish first.
		err = srv.snaps.Wait(ctx)
	}
	srv.tiers.Close(ctx)
	if err == nil {
		if err = srv.slot.acquire(ctx); err == nil {
			srv.slot.unload()
			srv.publishSlot()
			srv.slot.release()
		}
	}
	srv.owner.release()
	if err != nil {
		return fmt.Errorf("shutdown incomplete: %w", err)
	}
	return nil
}

func (srv *Server) closeConns() {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for _, c := range srv.conns {
		c.ch.Close()
	}
}
