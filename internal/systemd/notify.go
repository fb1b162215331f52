package systemd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// Environment variables the service manager sets.
const (
	EnvNotifySocket  = "NOTIFY_SOCKET"
	EnvWatchdogUSec  = "WATCHDOG_USEC"
	EnvWatchdogPID   = "WATCHDOG_PID"
	EnvListenPID     = "LISTEN_PID"
	EnvListenFDs     = "LISTEN_FDS"
	EnvListenFDNames = "LISTEN_FDNAMES"
	EnvJournalStream = "JOURNAL_STREAM"
)

var (
	// ErrEnvironment reports a malformed service-manager variable.
	ErrEnvironment = errors.New("systemd: malformed environment")
	// ErrNotify reports a notification that could not be delivered.
	ErrNotify = errors.New("systemd: notify failed")
)

// Notifier sends state changes to the service manager's notification
// socket. The zero Notifier is disabled: its methods send nothing and
// return nil, so a daemon can notify unconditionally.
type Notifier struct {
	addr string // "/path" or "@abstract"; "" when disabled
}

// NewNotifier returns a Notifier for socket, an absolute path or an
// abstract name starting with '@'. An empty socket gives a disabled
// Notifier.
func NewNotifier(socket string) (Notifier, error) {
	switch {
	case socket == "":
		return Notifier{}, nil
	case strings.HasPrefix(socket, "/"), strings.HasPrefix(socket, "@") && len(socket) > 1:
		return Notifier{addr: socket}, nil
	}
	return Notifier{}, fmt.Errorf("%w: %s=%q: want an absolute path or an @abstract name", ErrEnvironment, EnvNotifySocket, socket)
}

// NotifierFromEnv returns a Notifier for $NOTIFY_SOCKET, disabled when it
// is unset. The variable is left in place.
func NotifierFromEnv() (Notifier, error) {
	return NewNotifier(os.Getenv(EnvNotifySocket))
}

// Enabled reports whether n sends anything.
func (n Notifier) Enabled() bool { return n.addr != "" }

// Socket is the notification socket's address ("" when disabled).
func (n Notifier) Socket() string { return n.addr }

// Notify sends state, newline-separated VAR=VALUE assignments such as
// "READY=1\nSTATUS=serving", in one datagram. It gives up when ctx ends.
func (n Notifier) Notify(ctx context.Context, state string) error {
	if n.addr == "" {
		return nil
	}
	if state == "" {
		return fmt.Errorf("%w: empty state", ErrNotify)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixgram", n.addr)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotify, err)
	}
	defer c.Close()
	// A full receive queue blocks the write; ctx bounds the wait.
	stop := context.AfterFunc(ctx, func() { c.SetWriteDeadline(time.Now()) })
	defer stop()
	if _, err := c.Write([]byte(state)); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", ErrNotify, ctx.Err())
		}
		return fmt.Errorf("%w: %w", ErrNotify, err)
	}
	return nil
}

// Ready tells the manager that start-up is complete, with status as the
// STATUS= line when it is not empty.
func (n Notifier) Ready(ctx context.Context, status string) error {
	return n.Notify(ctx, withStatus("READY=1", status))
}

// Status sets the free-form status line that "systemctl status" shows.
func (n Notifier) Status(ctx context.Context, status string) error {
	return n.Notify(ctx, "STATUS="+oneLine(status))
}

// Stopping tells the manager that shutdown has begun.
func (n Notifier) Stopping(ctx context.Context, status string) error {
	return n.Notify(ctx, withStatus("STOPPING=1", status))
}

// WatchdogPing is one watchdog keep-alive.
func (n Notifier) WatchdogPing(ctx context.Context) error {
	return n.Notify(ctx, "WATCHDOG=1")
}

// Notify sends state to $NOTIFY_SOCKET; it does nothing when the variable
// is unset.
func Notify(ctx context.Context, state string) error {
	n, err := NotifierFromEnv()
	if err != nil {
		return err
	}
	return n.Notify(ctx, state)
}

func withStatus(state, status string) string {
	if status == "" {
		return state
	}
	return state + "\nSTATUS=" + oneLine(status)
}

// oneLine keeps a status within its assignment: a newline would start a
// new (unintended) variable.
func oneLine(s string) string {
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s)
}
