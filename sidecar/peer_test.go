package sidecar

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxd/ctxd/client"
)

// The peer tests run a client as another uid by re-executing this test
// binary as TestPeerHelperProcess under nobody (65534); only root can.
const (
	peerSocketEnv = "CTXD_PEER_SOCKET"
	peerUID       = 65534
	peerMarker    = "PEER_RESULT: "
)

// TestPeerHelperProcess is the client side of the peer tests: it dials the
// socket in CTXD_PEER_SOCKET, pings, and prints the outcome as a
// PEER_RESULT line. Without the variable it does nothing.
func TestPeerHelperProcess(t *testing.T) {
	path := os.Getenv(peerSocketEnv)
	if path == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, path)
	if err == nil {
		err = c.Ping(ctx, []byte("peer"))
		c.Close()
	}
	fmt.Printf("PEER_UID: %d\n", os.Getuid())
	switch {
	case err == nil:
		fmt.Println(peerMarker + "ok")
	case errors.Is(err, client.ErrPermissionDenied):
		fmt.Println(peerMarker + "permission denied")
		fmt.Printf("PEER_ERROR: %v\n", err)
	default:
		fmt.Printf(peerMarker+"other error: %v\n", err)
	}
}

// TestPeerWithOtherUIDRefused: a client of another uid that can reach the
// socket on the filesystem is still refused by its peer credentials, with
// ErrPermissionDenied; our own uid is served.
func TestPeerWithOtherUIDRefused(t *testing.T) {
	bin := peerSetup(t)
	ts, socket := startPeerServer(t, Config{})
	if got := runPeer(t, bin, socket); got != "permission denied" {
		t.Fatalf("uid %d peer: got %q, want permission denied", peerUID, got)
	}
	// The server's own uid is served, after the refusal too.
	c := dial(t, ts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx, []byte("own uid")); err != nil {
		t.Fatalf("own uid: %v", err)
	}
}

// TestPeerWithAllowedUIDAccepted: AllowUIDs admits that other uid.
func TestPeerWithAllowedUIDAccepted(t *testing.T) {
	bin := peerSetup(t)
	_, socket := startPeerServer(t, Config{AllowUIDs: []int{peerUID}})
	if got := runPeer(t, bin, socket); got != "ok" {
		t.Fatalf("allowed uid %d peer: got %q, want ok", peerUID, got)
	}
}

// peerSetup skips unless root and returns a copy of the test binary that
// uid 65534 can execute.
func peerSetup(t *testing.T) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another uid (CI runs as root)")
	}
	if os.Getenv(peerSocketEnv) != "" {
		t.Skip("inside the peer helper")
	}
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if othersCanExec(bin) {
		return bin
	}
	// go test builds in a 0700 temporary folder: copy the binary out.
	dir := worldTempDir(t)
	dst := filepath.Join(dir, filepath.Base(bin))
	src, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, 0o755); err != nil { // past the umask
		t.Fatal(err)
	}
	if !othersCanExec(dst) {
		t.Fatalf("%s is not executable by others even after copying", dst)
	}
	return dst
}

// othersCanExec reports whether "other" may traverse every folder above
// path and read and execute path.
func othersCanExec(path string) bool {
	path, err := filepath.Abs(path)
	if err != nil {
		return false
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm()&0o005 != 0o005 {
		return false
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		st, err := os.Stat(dir)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		if dir == filepath.Dir(dir) {
			return true
		}
	}
}

// worldTempDir is a fresh 0755 folder in os.TempDir() (t.TempDir's are
// 0700), removed after the test.
func worldTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ctxd-peer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if !othersCanExec(dir) {
		t.Skipf("%s is not reachable by other uids", dir)
	}
	return dir
}

// startPeerServer starts a server whose socket, once listening, is opened
// up to every uid at the filesystem level (folder 0755, socket 0666), so
// that only the peer-credential check stands between another uid and it.
func startPeerServer(t *testing.T, cfg Config) (*testServer, string) {
	t.Helper()
	cfg.SocketPath = filepath.Join(worldTempDir(t), "s", "ctxd.sock")
	ts := startServer(t, cfg)
	if err := os.Chmod(filepath.Dir(ts.socket), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ts.socket, 0o666); err != nil {
		t.Fatal(err)
	}
	return ts, ts.socket
}

// runPeer runs the helper as uid/gid 65534 against socket and returns its
// PEER_RESULT.
func runPeer(t *testing.T, bin, socket string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run=^TestPeerHelperProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), peerSocketEnv+"="+socket)
	cmd.Dir = filepath.Dir(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: peerUID, Gid: peerUID}}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("peer helper: %v; output:\n%s", err, out.String())
	}
	var result string
	for _, line := range strings.Split(out.String(), "\n") {
		if r, ok := strings.CutPrefix(line, peerMarker); ok {
			result = strings.TrimSpace(r)
		}
		if uid, ok := strings.CutPrefix(line, "PEER_UID: "); ok && strings.TrimSpace(uid) != fmt.Sprint(peerUID) {
			t.Fatalf("peer helper ran as uid %s, not %d", uid, peerUID)
		}
	}
	if result == "" {
		t.Fatalf("peer helper printed no %q line; output:\n%s", peerMarker, out.String())
	}
	t.Logf("peer helper (uid %d): %s", peerUID, result)
	return result
}
