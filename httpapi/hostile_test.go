package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxd/ctxd/internal/testmodel"
)

// Hostile neighbours, played by child processes: this test binary run
// again as TestHolderProcess (another uid holding connections open) or
// TestDoorEMFILEProcess (a door whose descriptor limit is nearly spent).
const (
	holdAddrEnv   = "CTXD_HOLD_ADDR"
	holdCountEnv  = "CTXD_HOLD_N"
	emfileDoorEnv = "CTXD_DOOR_EMFILE"
	otherUID      = 65534
)

// TestHolderProcess opens CTXD_HOLD_N connections to CTXD_HOLD_ADDR, sends
// nothing, and after a second prints how many the server still keeps
// open: "HELD k OF n". Without the variables it does nothing.
func TestHolderProcess(t *testing.T) {
	addr := os.Getenv(holdAddrEnv)
	if addr == "" {
		return
	}
	n, _ := strconv.Atoi(os.Getenv(holdCountEnv))
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			continue
		}
		conns = append(conns, c)
	}
	time.Sleep(time.Second)
	held, said := 0, ""
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		b, err := c.Read(make([]byte, 512))
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			held++
		} else if said == "" && b > 0 {
			said = "answered"
		}
		c.Close()
	}
	fmt.Printf("HELD %d OF %d (%s)\n", held, n, said)
}

// runHolder runs TestHolderProcess as uid 65534 against addr.
func runHolder(t *testing.T, addr string, n int) int {
	t.Helper()
	bin := binaryForOthers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run=^TestHolderProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), holdAddrEnv+"="+addr, holdCountEnv+"="+strconv.Itoa(n))
	cmd.Dir = filepath.Dir(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUID, Gid: otherUID}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("holder: %v\n%s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		var held, of int
		if _, err := fmt.Sscanf(l, "HELD %d OF %d", &held, &of); err == nil {
			t.Logf("uid %d: %s", otherUID, l)
			return held
		}
	}
	t.Fatalf("holder printed no result:\n%s", out)
	return 0
}

// TestAnotherUIDHoldsNoConnections: another local user opening 500
// connections holds none of them (each is refused and closed when
// accepted, nothing read), never reaches the daemon, and ctxd's own user
// is served meanwhile. With an API key another user may connect (the key
// decides per request) but holds at most MaxConnsPerPeer. Before, every
// connection stayed open until the 30 s header timeout and ~20,000 of
// them exhausted ctxd's descriptors.
func TestAnotherUIDHoldsNoConnections(t *testing.T) {
	g := startGuarded(t, &scripted{pieces: []string{"hi"}}, Config{}, nil)
	if held := runHolder(t, g.addr, 500); held != 0 {
		t.Errorf("uid %d holds %d connections open, want 0", otherUID, held)
	}
	if n := g.b.calls.Load(); n != 0 {
		t.Errorf("another uid's connections reached the daemon %d times", n)
	}
	if r := g.s.guard.stats.refusedPeer.Load(); r < 400 {
		t.Errorf("%d refusals for 500 connections", r)
	}
	if got := rawRequest(t, g.addr, "GET /api/version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Errorf("own uid: %q", got)
	}

	keyed := startGuarded(t, &scripted{}, Config{APIKey: "a-long-enough-key", MaxConnsPerPeer: 8, HeaderTimeout: 5 * time.Second}, nil)
	if held := runHolder(t, keyed.addr, 100); held > 8 {
		t.Errorf("with an API key uid %d holds %d connections, want ≤ MaxConnsPerPeer 8", otherUID, held)
	}
}

// binaryForOthers skips unless root and returns a copy of this test
// binary that uid 65534 can run.
func binaryForOthers(t *testing.T) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another uid (CI runs as root)")
	}
	if os.Getenv(holdAddrEnv) != "" {
		t.Skip("inside the holder")
	}
	src, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "ctxd-hostile-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "httpapi.test")
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dst, 0o755)
	return dst
}

// TestDoorEMFILEProcess serves a door whose descriptor limit is a few
// above what it holds once listening; it prints ADDR host:port and
// serves until stdin closes.
func TestDoorEMFILEProcess(t *testing.T) {
	if os.Getenv(emfileDoorEnv) == "" {
		return
	}
	f := &scripted{pieces: []string{"hi"}}
	f.model = os.Getenv(emfileDoorEnv)
	hc := Config{Addr: "127.0.0.1:0", MaxConns: 1000, MaxConnsPerPeer: 1000}
	hc.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	s := New(f, hc)
	ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	go s.Serve(ctx, ln)
	time.Sleep(100 * time.Millisecond) // the peer check has started: its netlink socket is open
	ents, _ := os.ReadDir("/proc/self/fd")
	lim := &syscall.Rlimit{Cur: uint64(len(ents) + 6), Max: uint64(len(ents) + 6)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, lim); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ADDR %s\n", ln.Addr())
	<-ctx.Done()
}

// TestDoorSurvivesEMFILE: a door out of descriptors backs off, never
// exits, keeps checking peers (its inet_diag socket is opened once) and
// serves its user again once descriptors free up.
func TestDoorSurvivesEMFILE(t *testing.T) {
	if os.Getenv(emfileDoorEnv) != "" {
		t.Skip("inside the door process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDoorEMFILEProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), emfileDoorEnv+"="+testmodel.Stories(t))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
				addrc <- a
			}
		}
		exited <- cmd.Wait()
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-exited:
		t.Fatalf("door process ended: %v\n%s", err, stderr.String())
	}
	var held []net.Conn
	for range 60 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	time.Sleep(500 * time.Millisecond)
	for _, c := range held {
		c.Close()
	}
	var got string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got = rawRequest(t, addr, "GET /api/version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); strings.HasPrefix(got, "HTTP/1.1 200") {
			break
		}
	}
	select {
	case err := <-exited:
		t.Fatalf("the door exited (%v)\n%s", err, stderr.String())
	default:
	}
	if !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Errorf("own uid after the descriptors came back: %q\n%s", got, stderr.String())
	}
	if !strings.Contains(stderr.String(), "too many open files") {
		t.Errorf("the door never hit EMFILE (the test proves nothing):\n%s", stderr.String())
	}
	stdin.Close()
	<-exited
}
