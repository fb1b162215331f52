package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/internal/testmodel"
)

// The tests run the real daemon by re-executing this test binary: with
// CTXD_TEST_MAIN=1 it is ctxd, its arguments taken from CTXD_TEST_ARGS
// (separated by \x1f, since go test owns the command line).
const (
	envMain = "CTXD_TEST_MAIN"
	envArgs = "CTXD_TEST_ARGS"
	argSep  = "\x1f"
)

func TestMain(m *testing.M) {
	if os.Getenv(envMain) == "1" {
		var args []string
		if a := os.Getenv(envArgs); a != "" {
			args = strings.Split(a, argSep)
		}
		os.Exit(run(args))
	}
	os.Exit(m.Run())
}

// syncBuffer collects a child's output while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// daemon is one ctxd process.
type daemon struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{} // closed when the process has exited
	state  *os.ProcessState
}

// startDaemon starts ctxd with args; the cleanup kills it if a test left
// it running.
func startDaemon(t *testing.T, args ...string) *daemon {
	t.Helper()
	return startCmd(t, daemonCmd(t, args, nil), false)
}

// daemonCmd is the command that runs ctxd with args and env added to a
// hermetic environment: no user config file and no CTXD_* settings (the
// tests that want a model pass --model).
func daemonCmd(t *testing.T, args, env []string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CTXD_") {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, "XDG_CONFIG_HOME="+t.TempDir(), envMain+"=1", envArgs+"="+strings.Join(args, argSep))
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// startCmd starts cmd as a daemon. With journal, its stdout and stderr are
// one pipe that JOURNAL_STREAM names, as under systemd.
func startCmd(t *testing.T, cmd *exec.Cmd, journal bool) *daemon {
	t.Helper()
	d := &daemon{cmd: cmd, stderr: new(syncBuffer), done: make(chan struct{})}
	copied := make(chan struct{})
	if journal {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(int(w.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(cmd.Env, fmt.Sprintf("JOURNAL_STREAM=%d:%d", st.Dev, st.Ino))
		cmd.Stdout, cmd.Stderr = w, w
		defer w.Close()
		go func() {
			io.Copy(d.stderr, r)
			r.Close()
			close(copied)
		}()
	} else {
		cmd.Stdout, cmd.Stderr = d.stderr, d.stderr
		close(copied)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		cmd.Wait()
		<-copied
		d.state = cmd.ProcessState
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			cmd.Process.Kill()
			<-d.done
		}
	})
	return d
}

// wait waits up to limit for the process to exit and returns its exit code.
func (d *daemon) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-d.done:
		return d.state.ExitCode()
	case <-time.After(limit):
		t.Fatalf("ctxd still running after %v; output:\n%s", limit, d.stderr.String())
		return -1
	}
}

func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// dialReady polls until the daemon answers on socket (20 s at most).
func dialReady(t *testing.T, d *daemon, socket string) *client.Client {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := client.Dial(ctx, socket)
		cancel()
		if err == nil {
			t.Cleanup(func() { c.Close() })
			return c
		}
		if d.exited() {
			t.Fatalf("ctxd exited with %d before serving; output:\n%s", d.state.ExitCode(), d.stderr.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("ctxd not answering on %s after 20s: %v; output:\n%s", socket, err, d.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type paths struct{ socketDir, socket, dataDir, lock string }

func newPaths(t *testing.T) paths {
	dir := t.TempDir()
	p := paths{socketDir: filepath.Join(dir, "run"), dataDir: filepath.Join(dir, "data")}
	p.socket = filepath.Join(p.socketDir, "ctxd.sock")
	p.lock = filepath.Join(p.dataDir, "ctxd.lock")
	return p
}

func (p paths) args(model string) []string {
	a := []string{"--ctx", "512", "--socket", p.socket, "--data-dir", p.dataDir}
	if model != "" {
		a = append(a, "--model", model)
	}
	return a
}

func mustNotExist(t *testing.T, what, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s %s still there (lstat: %v)", what, path, err)
	}
}

// checkModes: the socket folder is 0700 and the socket 0600 while serving.
func checkModes(t *testing.T, p paths) {
	t.Helper()
	st, err := os.Stat(p.socketDir)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o700 {
		t.Errorf("socket folder mode %#o, want 0700", got)
	}
	st, err = os.Lstat(p.socket)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Type() != fs.ModeSocket {
		t.Errorf("%s is %v, not a socket", p.socket, st.Mode())
	}
	if got := st.Mode().Perm(); got != 0o600 {
		t.Errorf("socket mode %#o, want 0600", got)
	}
}

func TestSIGTERMShutsDownCleanly(t *testing.T) {
	p := newPaths(t)
	d := startDaemon(t, p.args(testmodel.Stories(t))...)
	c := dialReady(t, d, p.socket)
	checkModes(t, p)
	b, err := os.ReadFile(p.lock)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(d.cmd.Process.Pid) {
		t.Errorf("lock file holds pid %q, daemon is %d", got, d.cmd.Process.Pid)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Model == nil {
		t.Fatalf("no model loaded: %v", st)
	}
	s, err := c.OpenSession(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if s.ContextTokens() != 512 {
		t.Errorf("session context %d, want 512 (--ctx)", s.ContextTokens())
	}
	m := client.Manifest{Segments: []client.Segment{
		{ID: "system", Kind: client.KindSystem, Text: strings.Repeat("Once upon a time, there was a little girl named Lily. ", 8), Stable: true},
		{ID: "turn", Kind: client.KindUserTurn, Text: " One day, Lily saw a big red ball."},
	}}
	if _, err := s.EnsurePrefix(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PrefillSuffix(ctx); err != nil {
		t.Fatal(err)
	}
	var streamed int
	res, err := s.Decode(ctx, client.DecodeOptions{MaxTokens: 5}, func(client.Token) error { streamed++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if res.Tokens != 5 || streamed != 5 || res.Reason != client.StopMaxTokens {
		t.Fatalf("decode: %+v, %d streamed", res, streamed)
	}

	// SIGTERM with the client and its session still open.
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM; output:\n%s", code, d.stderr.String())
	}
	if out := d.stderr.String(); !strings.Contains(out, "shut down cleanly") {
		t.Errorf("no clean-shutdown log line; output:\n%s", out)
	}
	mustNotExist(t, "socket", p.socket)
	mustNotExist(t, "lock file", p.lock)
	// The open session was snapshotted to the SSD tier on the way out.
	if _, err := os.Stat(filepath.Join(p.dataDir, "cold", "snapshots", "auto-"+t.Name()+".snap")); err != nil {
		t.Errorf("no automatic snapshot after SIGTERM: %v", err)
	}
	// The open connection was closed by the daemon.
	if err := c.Ping(ctx, nil); !errors.Is(err, client.ErrClosed) {
		t.Errorf("ping after shutdown: %v, want ErrClosed", err)
	}
}

func TestSecondDaemonRefused(t *testing.T) {
	p := newPaths(t)
	model := testmodel.Stories(t)
	first := startDaemon(t, p.args(model)...)
	c := dialReady(t, first, p.socket)
	checkModes(t, p)

	other := filepath.Join(t.TempDir(), "other", "ctxd.sock")
	second := startDaemon(t, "--model", model, "--ctx", "512", "--socket", other, "--data-dir", p.dataDir)
	code := second.wait(t, 10*time.Second)
	out := second.stderr.String()
	if code == 0 {
		t.Fatalf("second daemon exited 0; output:\n%s", out)
	}
	for _, want := range []string{
		"another ctxd owns this data directory",
		fmt.Sprintf("locked by pid %d", first.cmd.Process.Pid),
		"--data-dir",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("second daemon's stderr lacks %q:\n%s", want, out)
		}
	}
	mustNotExist(t, "second daemon's socket", other)

	// The first daemon is untouched: it serves and still owns the lock.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx, []byte("still here")); err != nil {
		t.Fatalf("first daemon after the refusal: %v", err)
	}
	b, err := os.ReadFile(p.lock)
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(first.cmd.Process.Pid) {
		t.Fatalf("lock file after the refusal: %q %v", b, err)
	}
	first.cmd.Process.Signal(syscall.SIGTERM)
	if code := first.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("first daemon exit code %d; output:\n%s", code, first.stderr.String())
	}
}

func TestBadFlags(t *testing.T) {
	model := testmodel.Stories(t)
	missing := filepath.Join(t.TempDir(), "no-such-model.gguf")
	cases := []struct {
		name  string
		args  []string
		code  int
		wants []string
	}{
		{"unknown kv type", []string{"--model", model, "--kv-type", "q4_k"}, 2, []string{"--kv-type", `"q4_k"`, "f16"}},
		{"missing model", []string{"--model", missing}, 1, []string{"not found", missing}},
		{"unknown flag", []string{"--no-such-flag"}, 2, []string{"no-such-flag"}},
		{"bad allow-uids", []string{"--allow-uids", "1000,bob"}, 2, []string{"--allow-uids", `"bob"`}},
		{"negative ctx", []string{"--model", model, "--ctx", "-1"}, 2, []string{"invalid ctx = \"-1\" (flag --ctx): must not be negative"}},
		{"non-integer batch", []string{"--model", model, "--batch", "abc"}, 2, []string{"invalid batch", "flag --batch", "not an integer"}},
		{"stray argument", []string{"--model", model, "serve"}, 2, []string{`unexpected argument "serve"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPaths(t)
			args := append([]string{"--socket", p.socket, "--data-dir", p.dataDir}, tc.args...)
			d := startDaemon(t, args...)
			code := d.wait(t, 10*time.Second)
			out := d.stderr.String()
			if code != tc.code {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.code, out)
			}
			for _, w := range tc.wants {
				if !strings.Contains(out, w) {
					t.Errorf("stderr lacks %q:\n%s", w, out)
				}
			}
			mustNotExist(t, "socket", p.socket)
			mustNotExist(t, "lock file", p.lock)
		})
	}
}
