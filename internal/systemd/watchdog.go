package systemd

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"
)

// WatchdogFromEnv returns the watchdog timeout the manager enforces on this
// process ($WATCHDOG_USEC), or 0 when there is none: the variable is unset,
// or $WATCHDOG_PID names another process.
func WatchdogFromEnv() (time.Duration, error) {
	usec := os.Getenv(EnvWatchdogUSec)
	if usec == "" {
		return 0, nil
	}
	if p := os.Getenv(EnvWatchdogPID); p != "" {
		pid, err := strconv.Atoi(p)
		if err != nil || pid <= 0 {
			return 0, fmt.Errorf("%w: %s=%q is not a pid", ErrEnvironment, EnvWatchdogPID, p)
		}
		if pid != os.Getpid() {
			return 0, nil
		}
	}
	us, err := strconv.ParseInt(usec, 10, 64)
	if err != nil || us <= 0 {
		return 0, fmt.Errorf("%w: %s=%q is not a positive number of microseconds", ErrEnvironment, EnvWatchdogUSec, usec)
	}
	return time.Duration(us) * time.Microsecond, nil
}

// Watchdog keeps the manager's watchdog fed: Run sends WATCHDOG=1 every
// Timeout/2 for as long as Check passes.
type Watchdog struct {
	Notifier Notifier
	// Timeout is the manager's limit (WatchdogFromEnv); pings go out at
	// half of it, so one late tick does not trip it.
	Timeout time.Duration
	// Check, when set, runs before each ping; an error skips that ping,
	// so a wedged daemon stops pinging and the manager acts. A Check that
	// blocks withholds pings too.
	Check func(context.Context) error
	// Log receives failed checks and failed pings; nil means slog.Default().
	Log *slog.Logger
}

// Run pings once at once and then every Timeout/2 until ctx ends; it
// returns nil then. It refuses a disabled Notifier or a Timeout too
// small to halve. Failed pings are logged and retried on the next tick: the
// manager's socket comes back after a re-exec.
func (w Watchdog) Run(ctx context.Context) error {
	if !w.Notifier.Enabled() {
		return fmt.Errorf("%w: watchdog without %s", ErrEnvironment, EnvNotifySocket)
	}
	every := w.Timeout / 2
	if every <= 0 {
		return fmt.Errorf("%w: watchdog timeout %v", ErrEnvironment, w.Timeout)
	}
	log := w.Log
	if log == nil {
		log = slog.Default()
	}
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		failing = w.tick(ctx, log, failing)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// tick runs the check and pings; it logs a failing check once, when it
// starts failing, and reports whether it is failing now.
func (w Watchdog) tick(ctx context.Context, log *slog.Logger, failing bool) bool {
	if w.Check != nil {
		if err := w.Check(ctx); err != nil {
			if !failing && ctx.Err() == nil {
				log.Warn("watchdog: health check failed, pings withheld", "err", err)
			}
			return true
		}
		if failing {
			log.Info("watchdog: health check passes again, pinging")
		}
	}
	if err := w.Notifier.WatchdogPing(ctx); err != nil && ctx.Err() == nil {
		log.Warn("watchdog: ping failed", "err", err)
	}
	return false
}
