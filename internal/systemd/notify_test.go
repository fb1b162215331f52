package systemd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// notifySocket is a real unixgram socket standing in for the manager's.
type notifySocket struct {
	conn *net.UnixConn
	addr string
}

func listenNotify(t *testing.T, addr string) *notifySocket {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &notifySocket{conn: c, addr: addr}
}

func newNotifySocket(t *testing.T) *notifySocket {
	return listenNotify(t, filepath.Join(t.TempDir(), "notify.sock"))
}

// next reads one datagram, failing after limit.
func (s *notifySocket) next(t *testing.T, limit time.Duration) string {
	t.Helper()
	msg, err := s.read(limit)
	if err != nil {
		t.Fatalf("no notification within %v: %v", limit, err)
	}
	return msg
}

func (s *notifySocket) read(limit time.Duration) (string, error) {
	buf := make([]byte, 4096)
	s.conn.SetReadDeadline(time.Now().Add(limit))
	n, err := s.conn.Read(buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func TestNotifierSendsStates(t *testing.T) {
	sock := newNotifySocket(t)
	t.Setenv(EnvNotifySocket, sock.addr)
	n, err := NotifierFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if !n.Enabled() || n.Socket() != sock.addr {
		t.Fatalf("notifier %+v for %s", n, sock.addr)
	}
	ctx := context.Background()
	steps := []struct {
		send func() error
		want string
	}{
		{func() error { return n.Ready(ctx, "serving model.gguf, 0 sessions") }, "READY=1\nSTATUS=serving model.gguf, 0 sessions"},
		{func() error { return n.Ready(ctx, "") }, "READY=1"},
		{func() error { return n.Status(ctx, "two\nlines") }, "STATUS=two lines"},
		{func() error { return n.WatchdogPing(ctx) }, "WATCHDOG=1"},
		{func() error { return n.Stopping(ctx, "shutting down") }, "STOPPING=1\nSTATUS=shutting down"},
		{func() error { return n.Notify(ctx, "RELOADING=1") }, "RELOADING=1"},
		{func() error { return Notify(ctx, "EXTEND_TIMEOUT_USEC=1000000") }, "EXTEND_TIMEOUT_USEC=1000000"},
	}
	for i, st := range steps {
		if err := st.send(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := sock.next(t, 5*time.Second); got != st.want {
			t.Errorf("step %d: got %q, want %q", i, got, st.want)
		}
	}
	if err := n.Notify(ctx, ""); !errors.Is(err, ErrNotify) {
		t.Errorf("empty state: %v, want ErrNotify", err)
	}
}

func TestNotifierAbstractSocket(t *testing.T) {
	name := fmt.Sprintf("@ctxd-systemd-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	sock := listenNotify(t, name)
	n, err := NewNotifier(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Ready(context.Background(), "abstract"); err != nil {
		t.Fatal(err)
	}
	if got := sock.next(t, 5*time.Second); got != "READY=1\nSTATUS=abstract" {
		t.Errorf("got %q", got)
	}
}

func TestNotifierDisabledAndMalformed(t *testing.T) {
	t.Setenv(EnvNotifySocket, "")
	n, err := NotifierFromEnv()
	if err != nil || n.Enabled() {
		t.Fatalf("unset NOTIFY_SOCKET: %+v %v", n, err)
	}
	if err := n.Ready(context.Background(), "x"); err != nil {
		t.Errorf("disabled notifier: %v", err)
	}
	if err := Notify(context.Background(), "READY=1"); err != nil {
		t.Errorf("Notify without NOTIFY_SOCKET: %v", err)
	}
	for _, bad := range []string{"relative/notify.sock", "@", "vsock:2:1234"} {
		if _, err := NewNotifier(bad); !errors.Is(err, ErrEnvironment) || !strings.Contains(err.Error(), bad) {
			t.Errorf("NewNotifier(%q): %v, want ErrEnvironment naming it", bad, err)
		}
	}
	// A socket nobody listens on is a delivery failure, not a hang.
	n, err = NewNotifier(filepath.Join(t.TempDir(), "gone.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Ready(context.Background(), ""); !errors.Is(err, ErrNotify) {
		t.Errorf("notify to a missing socket: %v, want ErrNotify", err)
	}
}

// A manager that stops reading fills its queue; Notify then gives up when
// its context ends instead of blocking the daemon.
func TestNotifyHonoursContext(t *testing.T) {
	sock := newNotifySocket(t)
	n, _ := NewNotifier(sock.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var err error
	for i := 0; i < 1_000_000 && err == nil; i++ {
		err = n.Status(ctx, strings.Repeat("x", 1024))
	}
	if !errors.Is(err, ErrNotify) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("notify into a full queue: %v, want ErrNotify and DeadlineExceeded", err)
	}
}

func TestWatchdogFromEnv(t *testing.T) {
	self := fmt.Sprint(os.Getpid())
	cases := []struct {
		usec, pid string
		want      time.Duration
		bad       bool
	}{
		{"", "", 0, false},
		{"30000000", "", 30 * time.Second, false},
		{"30000000", self, 30 * time.Second, false},
		{"30000000", "1", 0, false}, // another process's watchdog
		{"abc", "", 0, true},
		{"0", "", 0, true},
		{"-5", self, 0, true},
		{"1000", "me", 0, true},
	}
	for _, tc := range cases {
		t.Setenv(EnvWatchdogUSec, tc.usec)
		t.Setenv(EnvWatchdogPID, tc.pid)
		got, err := WatchdogFromEnv()
		if tc.bad {
			if !errors.Is(err, ErrEnvironment) {
				t.Errorf("USEC=%q PID=%q: %v, want ErrEnvironment", tc.usec, tc.pid, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("USEC=%q PID=%q: %v %v, want %v", tc.usec, tc.pid, got, err, tc.want)
		}
	}
}

func TestWatchdogPingsAtHalfTheTimeout(t *testing.T) {
	sock := newNotifySocket(t)
	n, _ := NewNotifier(sock.addr)
	var healthy atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	const timeout = 200 * time.Millisecond
	logs := new(lockedBuffer)
	go func() {
		done <- Watchdog{Notifier: n, Timeout: timeout, Check: func(context.Context) error {
			if !healthy.Load() {
				return errors.New("wedged")
			}
			return nil
		}, Log: slog.New(slog.NewTextHandler(logs, nil))}.Run(ctx)
	}()
	// Unhealthy: no pings at all.
	if msg, err := sock.read(3 * timeout); err == nil {
		t.Fatalf("ping %q while the check fails", msg)
	}
	if n := strings.Count(logs.String(), `msg="watchdog: health check failed, pings withheld" err=wedged`); n != 1 {
		t.Errorf("failing check logged %d times, want once:\n%s", n, logs.String())
	}
	healthy.Store(true)
	var stamps []time.Time
	for i := range 5 {
		if got := sock.next(t, 5*timeout); got != "WATCHDOG=1" {
			t.Fatalf("ping %d: %q", i, got)
		}
		stamps = append(stamps, time.Now())
	}
	// Pings come every timeout/2; the median gap is robust to one late tick.
	var gaps []time.Duration
	for i := 1; i < len(stamps); i++ {
		gaps = append(gaps, stamps[i].Sub(stamps[i-1]))
	}
	slices.Sort(gaps)
	if med := gaps[len(gaps)/2]; med >= 3*timeout/4 || med <= timeout/4 {
		t.Errorf("median gap between pings %v (gaps %v), want about %v", med, gaps, timeout/2)
	}
	if !strings.Contains(logs.String(), "health check passes again") {
		t.Errorf("recovery not logged:\n%s", logs.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run ignored its context")
	}
}

func TestWatchdogRefusesBadSetup(t *testing.T) {
	if err := (Watchdog{Timeout: time.Second}).Run(context.Background()); !errors.Is(err, ErrEnvironment) {
		t.Errorf("disabled notifier: %v", err)
	}
	n, _ := NewNotifier("/nonexistent/notify.sock")
	if err := (Watchdog{Notifier: n}).Run(context.Background()); !errors.Is(err, ErrEnvironment) {
		t.Errorf("zero timeout: %v", err)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
