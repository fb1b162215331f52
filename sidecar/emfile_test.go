package sidecar

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/engine/llama"
)

// The EMFILE test runs a server in a child process (this test binary
// again, as TestEMFILEServerProcess) whose RLIMIT_NOFILE is a few
// descriptors above what it holds once listening, so that a handful of
// client connections exhaust its descriptor table.
const emfileSocketEnv = "CTXD_EMFILE_SOCKET"

// TestEMFILEServerProcess is the server side: it listens on the socket in
// CTXD_EMFILE_SOCKET, lowers its descriptor limit, prints READY and
// serves until stdin closes. Without the variable it does nothing.
func TestEMFILEServerProcess(t *testing.T) {
	path := os.Getenv(emfileSocketEnv)
	if path == "" {
		return
	}
	srv, err := New(context.Background(), Config{Engine: llama.Backend{}, SocketPath: path,
		DataDir: filepath.Join(filepath.Dir(path), "data"), NoCold: true, HandshakeTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ln, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	ents, _ := os.ReadDir("/proc/self/fd")
	lim := &syscall.Rlimit{Cur: uint64(len(ents) + 4), Max: uint64(len(ents) + 4)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, lim); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("READY\n")
	if err := srv.Serve(ctx, ln); err != nil {
		os.Stdout.WriteString("SERVE ENDED: " + err.Error() + "\n")
		os.Exit(3)
	}
	os.Stdout.WriteString("SERVE ENDED CLEANLY\n")
}

// TestAcceptSurvivesEMFILE: a server out of descriptors (EMFILE on
// accept) backs off and keeps serving once descriptors free up; it never
// exits. Before the fix its accept loop returned "accept4: too many open
// files" and the daemon stopped.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	if os.Getenv(emfileSocketEnv) != "" {
		t.Skip("inside the server process")
	}
	dir, err := os.MkdirTemp("", "ctxd-emfile-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "s", "ctxd.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestEMFILEServerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), emfileSocketEnv+"="+socket)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	select {
	case l := <-lines:
		if l != "READY" {
			t.Fatalf("server process said %q; stderr:\n%s", l, stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("server process never got ready")
	}
	// Far more connections than the child has descriptors for.
	var held []net.Conn
	for range 40 {
		c, err := net.Dial("unix", socket)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		held = append(held, c)
	}
	time.Sleep(500 * time.Millisecond) // the child hits EMFILE meanwhile
	for _, c := range held {
		c.Close()
	}
	// Once they are gone a client is served.
	var served error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
		var c *client.Client
		if c, served = client.Dial(dctx, socket); served == nil {
			served = c.Ping(dctx, []byte("after EMFILE"))
			c.Close()
		}
		dcancel()
		if served == nil {
			break
		}
	}
	select {
	case err := <-exited:
		t.Fatalf("the server exited (%v); stderr:\n%s", err, stderr.String())
	default:
	}
	if served != nil {
		t.Fatalf("no client served after the descriptors came back: %v; stderr:\n%s", served, stderr.String())
	}
	stdin.Close()
	if err := <-exited; err != nil {
		t.Fatalf("server process: %v; stderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "too many open files") {
		t.Errorf("the server never hit EMFILE (the test proves nothing); stderr:\n%s", stderr.String())
	}
}
