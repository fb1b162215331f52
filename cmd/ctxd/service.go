package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/ctxd/ctxd/httpapi"
	"github.com/ctxd/ctxd/internal/systemd"
	"github.com/ctxd/ctxd/protocol"
	"github.com/ctxd/ctxd/sidecar"
)

const (
	notifyTimeout = 2 * time.Second // one notification at most
	statusEvery   = 2 * time.Second // STATUS= refresh while serving
)

// serve runs the daemon: it takes the socket the service manager passed
// (or creates its own), loads the model, tells the manager it is ready,
// and serves until SIGTERM or SIGINT.
// httpSettings configure the HTTP API; explicit is false for the default
// address, which ctxd skips with a warning when it is taken.
type httpSettings struct {
	cfg      httpapi.Config
	explicit bool
}

// httpOff as the http setting turns the HTTP API off.
const httpOff = "off"

func serve(sc sidecar.Config, hs httpSettings, log *slog.Logger) int {
	notifier, err := systemd.NotifierFromEnv()
	if err != nil {
		log.Warn("not notifying the service manager", "err", err)
	}
	watchdog, err := systemd.WatchdogFromEnv()
	if err != nil {
		log.Warn("watchdog off", "err", err)
	}
	notify := func(what string, send func(context.Context) error) {
		ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
		defer cancel()
		if err := send(ctx); err != nil {
			log.Warn("notifying the service manager", "what", what, "err", err)
		}
	}
	setStatus := func(s string) {
		notify("status", func(ctx context.Context) error { return notifier.Status(ctx, s) })
	}

	activated, err := activatedListener(log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ctxd: socket activation: %v\n", err)
		setStatus("failed: " + err.Error())
		return 1
	}
	if sc.ModelPath != "" {
		setStatus("loading " + sc.ModelPath)
	}
	// SIGTERM during a slow start (a large model loading) is honoured:
	// the signal context exists before the daemon does.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	srv, err := sidecar.New(ctx, sc)
	if err != nil {
		if activated != nil {
			activated.Close()
		}
		setStatus("failed: " + err.Error())
		if errors.Is(err, sidecar.ErrAlreadyRunning) {
			fmt.Fprintf(os.Stderr, "ctxd: %v\nctxd: only one ctxd may own a data directory; stop the other one or pass another --data-dir\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "ctxd: %v\n", err)
		return exitStatus(err)
	}
	defer srv.Close()
	ln := activated
	if ln == nil {
		if ln, err = srv.Listen(); err != nil {
			setStatus("failed: " + err.Error())
			fmt.Fprintf(os.Stderr, "ctxd: %v\n", err)
			return exitStatus(err)
		}
	}
	var door *httpapi.Server
	var doorLn net.Listener
	if hs.cfg.Addr != httpOff {
		door = httpapi.New(srv, hs.cfg)
		if doorLn, err = door.Listen(); err != nil {
			if hs.explicit {
				setStatus("failed: " + err.Error())
				fmt.Fprintf(os.Stderr, "ctxd: http: %v\n", err)
				return exitStatus(err)
			}
			log.Warn("HTTP API off: its default address is not available (set --http ADDR, or --http off)", "addr", hs.cfg.Addr, "err", err)
			door = nil
		}
	}

	// The socket listens already: a client connecting now is queued and
	// served once Serve accepts, so the daemon is ready.
	status := &serviceStatus{srv: srv}
	readyLine := status.line()
	notify("ready", func(ctx context.Context) error { return notifier.Ready(ctx, readyLine) })
	loops, endLoops := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if notifier.Enabled() {
		wg.Go(func() { status.loop(loops, notifier, log, readyLine) })
		if watchdog > 0 {
			log.Info("watchdog on", "timeout", watchdog)
			wg.Go(func() {
				systemd.Watchdog{
					Notifier: notifier, Timeout: watchdog, Log: log,
					// Summary takes the server's lock: a wedged server
					// blocks here, pings stop and the manager restarts it.
					Check: func(context.Context) error { srv.Summary(); return nil },
				}.Run(loops)
			})
		}
	}

	var doorWG sync.WaitGroup
	if door != nil {
		doorWG.Go(func() {
			if err := door.Serve(ctx, doorLn); err != nil {
				log.Error("HTTP API stopped", "err", err)
			}
		})
	}
	err = srv.Serve(ctx, ln)
	stop() // the HTTP API ends with the socket
	doorWG.Wait()
	endLoops()
	wg.Wait()
	notify("stopping", func(ctx context.Context) error { return notifier.Stopping(ctx, "shutting down") })
	if err != nil {
		log.Error("stopped", "err", err)
		return exitStatus(err)
	}
	log.Info("shut down cleanly")
	return 0
}

// exitStatus is 2 for a configuration error found after parsing (a value
// the daemon refuses, an address that needs a key, an unsafe folder), so
// that systemd does not restart ctxd in a loop (RestartPreventExitStatus=2),
// and 1 for any other failure.
func exitStatus(err error) int {
	switch {
	case errors.Is(err, sidecar.ErrConfig), errors.Is(err, sidecar.ErrUnsafeFolder),
		errors.Is(err, protocol.ErrInvalidArgument), errors.Is(err, httpapi.ErrForbidden):
		return 2
	}
	return 1
}

// activatedListener is the Unix stream socket the service manager passed,
// or nil without socket activation. Other passed sockets are closed.
func activatedListener(log *slog.Logger) (net.Listener, error) {
	passed, err := systemd.Listeners()
	if err != nil {
		return nil, err
	}
	var chosen net.Listener
	for _, l := range passed {
		if chosen == nil && l.Listener.Addr().Network() == "unix" {
			chosen = l.Listener
			log.Info("socket passed by the service manager", "name", l.Name, "addr", l.Listener.Addr().String())
			continue
		}
		log.Warn("ignoring a passed socket", "name", l.Name, "network", l.Listener.Addr().Network(), "addr", l.Listener.Addr().String())
		l.Listener.Close()
	}
	if chosen == nil && len(passed) > 0 {
		return nil, fmt.Errorf("none of the %d passed sockets is a Unix stream socket (ListenStream=/path)", len(passed))
	}
	return chosen, nil
}

// serviceStatus is the STATUS= line: the model and the session count.
type serviceStatus struct {
	srv   *sidecar.Server
	model string // last model seen; the engine may be busy at the next look
}

func (s *serviceStatus) line() string {
	sum := s.srv.Summary()
	if !sum.EngineBusy {
		s.model = ""
		if sum.Model != "" {
			s.model = filepath.Base(sum.Model)
		}
	}
	model := s.model
	if model == "" {
		model = "no model loaded"
	}
	return fmt.Sprintf("serving %s, %s, %s", model, count(sum.Sessions, "session"), count(sum.Connections, "client"))
}

func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// loop sends the status line whenever it changes from last, until ctx
// ends.
func (s *serviceStatus) loop(ctx context.Context, n systemd.Notifier, log *slog.Logger, last string) {
	t := time.NewTicker(statusEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		line := s.line()
		if line == last {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, notifyTimeout)
		if err := n.Status(sctx, line); err != nil && ctx.Err() == nil {
			log.Warn("notifying the service manager", "what", "status", "err", err)
		} else {
			last = line
		}
		cancel()
	}
}

// newLogger builds the slog logger for format (see the log-format setting).
func newLogger(w *os.File, level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == logAuto {
		switch {
		case systemd.IsJournal(w):
			format = logJournal
		case !systemd.IsTerminal(w) || os.Getenv(systemd.EnvJournalStream) != "":
			format = logPlain
		default:
			format = logText
		}
	}
	switch format {
	case logJournal:
		return slog.New(systemd.NewJournalHandler(w, opts))
	case logPlain:
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
