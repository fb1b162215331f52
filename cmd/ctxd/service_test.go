package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/internal/testmodel"
)

// notifyListener is a real unixgram socket standing in for the service
// manager's NOTIFY_SOCKET; it collects every datagram.
type notifyListener struct {
	path string
	msgs chan string
	seen []string // messages taken so far, for failure reports
}

func listenNotify(t *testing.T) *notifyListener {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	n := &notifyListener{path: path, msgs: make(chan string, 1024)}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := c.Read(buf)
			if err != nil {
				return
			}
			n.msgs <- string(buf[:k])
		}
	}()
	t.Cleanup(func() { c.Close() })
	return n
}

// await returns the first message (after those already taken) for which
// match holds, failing after limit.
func (n *notifyListener) await(t *testing.T, d *daemon, what string, limit time.Duration, match func(string) bool) string {
	t.Helper()
	deadline := time.After(limit)
	for {
		select {
		case m := <-n.msgs:
			n.seen = append(n.seen, m)
			if match(m) {
				return m
			}
		case <-deadline:
			t.Fatalf("no %s notification within %v; got %q; ctxd output:\n%s", what, limit, n.seen, d.stderr.String())
			return ""
		}
	}
}

func hasLine(line string) func(string) bool {
	return func(m string) bool {
		for _, l := range strings.Split(m, "\n") {
			if l == line {
				return true
			}
		}
		return false
	}
}

// A service manager passes the listening socket (LISTEN_FDS) and starts
// ctxd on the first connection; ctxd serves that socket, ignores --socket
// and leaves the socket file to the manager.
func TestSocketActivation(t *testing.T) {
	activate, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		t.Skip("systemd-socket-activate not installed (apt-get install systemd): socket activation untested")
	}
	p := newPaths(t)
	if err := os.MkdirAll(p.socketDir, 0o700); err != nil {
		t.Fatal(err)
	}
	ignored := filepath.Join(t.TempDir(), "ignored.sock")
	ns := listenNotify(t)
	args := []string{"--model", testmodel.Stories(t), "--ctx", "512", "--data-dir", p.dataDir, "--socket", ignored}
	self := daemonCmd(t, args, nil)
	// systemd-socket-activate passes only the variables named with -E.
	saArgs := []string{"-l", p.socket, "--fdname=ctxd.socket", "-E", "NOTIFY_SOCKET=" + ns.path}
	for _, kv := range self.Env {
		if strings.HasPrefix(kv, "CTXD_TEST_") {
			saArgs = append(saArgs, "-E", kv)
		}
	}
	d := startCmd(t, exec.Command(activate, append(saArgs, self.Path)...), false)

	// The manager listens before ctxd runs.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(d.stderr.String(), "Listening on") {
		if d.exited() || time.Now().After(deadline) {
			t.Fatalf("systemd-socket-activate not listening; output:\n%s", d.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if strings.Contains(d.stderr.String(), "socket passed by the service manager") {
		t.Fatal("ctxd started before the first connection")
	}

	// The first connection starts ctxd; it is queued, then served.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, p.socket)
	if err != nil {
		t.Fatalf("dial the activated socket: %v; output:\n%s", err, d.stderr.String())
	}
	defer c.Close()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Model == nil || !strings.HasSuffix(st.Model.Path, "stories260K.gguf") {
		t.Fatalf("status of the activated ctxd: %v", st)
	}
	ready := ns.await(t, d, "READY=1", 10*time.Second, hasLine("READY=1"))
	if !strings.Contains(ready, "STATUS=serving stories260K.gguf") {
		t.Errorf("ready message %q lacks the serving status", ready)
	}
	out := d.stderr.String()
	for _, want := range []string{"socket passed by the service manager", "name=ctxd.socket", "addr=" + p.socket} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	// systemd-socket-activate execs ctxd: same process, and LISTEN_PID
	// named it.
	if b, err := os.ReadFile(p.lock); err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(d.cmd.Process.Pid) {
		t.Errorf("lock file %q (%v), want pid %d", b, err, d.cmd.Process.Pid)
	}
	mustNotExist(t, "--socket of an activated ctxd", ignored)

	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM; output:\n%s", code, d.stderr.String())
	}
	ns.await(t, d, "STOPPING=1", time.Second, hasLine("STOPPING=1"))
	// The socket belongs to the manager: ctxd does not unlink it.
	if st, err := os.Lstat(p.socket); err != nil || st.Mode().Type() != os.ModeSocket {
		t.Errorf("activated socket after shutdown: %v %v, want it left in place", st, err)
	}
	mustNotExist(t, "lock file", p.lock)
}

// ctxd speaks the notify protocol: READY=1 with a STATUS= once serving,
// STATUS= updates, WATCHDOG=1 at half of WATCHDOG_USEC, STOPPING=1 on
// SIGTERM; with stderr on the journal its log lines carry priorities and
// no timestamps.
func TestNotifyProtocol(t *testing.T) {
	p := newPaths(t)
	ns := listenNotify(t)
	const watchdog = 400 * time.Millisecond
	env := []string{"NOTIFY_SOCKET=" + ns.path, "WATCHDOG_USEC=" + strconv.FormatInt(watchdog.Microseconds(), 10)}
	d := startCmd(t, daemonCmd(t, p.args(testmodel.Stories(t)), env), true)

	loading := ns.await(t, d, "loading STATUS", 20*time.Second, func(m string) bool { return strings.HasPrefix(m, "STATUS=loading ") })
	if !strings.HasSuffix(loading, "stories260K.gguf") {
		t.Errorf("loading status %q", loading)
	}
	ready := ns.await(t, d, "READY=1", 20*time.Second, hasLine("READY=1"))
	if want := "READY=1\nSTATUS=serving stories260K.gguf, 0 sessions, 0 clients"; ready != want {
		t.Errorf("ready message %q, want %q", ready, want)
	}
	for range 2 {
		ns.await(t, d, "WATCHDOG=1", 4*watchdog, hasLine("WATCHDOG=1"))
	}

	c := dialReady(t, d, p.socket)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.OpenSession(ctx, t.Name()); err != nil {
		t.Fatal(err)
	}
	ns.await(t, d, "STATUS with the session", 4*statusEvery, hasLine("STATUS=serving stories260K.gguf, 1 session, 1 client"))

	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ns.await(t, d, "STOPPING=1", 10*time.Second, hasLine("STOPPING=1"))
	if code := d.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM; output:\n%s", code, d.stderr.String())
	}

	out := d.stderr.String()
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(line, "<") || strings.Contains(line, "time=") {
			t.Errorf("journal log line %q: want a <N> priority prefix and no timestamp", line)
		}
	}
	for _, want := range []string{`<6>level=INFO msg="watchdog on" timeout=400ms`, `<6>level=INFO msg="shut down cleanly"`} {
		if !strings.Contains(out, want) {
			t.Errorf("journal log lacks %q:\n%s", want, out)
		}
	}
}

// make install honours HOME, PREFIX and UNITDIR, rewrites ExecStart, and
// systemd-analyze accepts the installed user units.
func TestMakeInstall(t *testing.T) {
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("make not installed: make install untested")
	}
	root, err := testmodel.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	home, prefix, runtime := filepath.Join(tmp, "home"), filepath.Join(tmp, "prefix"), filepath.Join(tmp, "run")
	if err := os.Mkdir(runtime, 0o700); err != nil {
		t.Fatal(err)
	}
	// The binaries to install: copies of this test binary (which is ctxd),
	// so the test neither builds nor depends on bin/.
	src := filepath.Join(tmp, "src")
	os.Mkdir(src, 0o755)
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	var bins []string
	for _, name := range []string{"ctxd", "ctxctl"} {
		bins = append(bins, filepath.Join(src, name))
		if err := os.WriteFile(bins[len(bins)-1], self, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	install := func(extra ...string) {
		t.Helper()
		// -o build: the test installs what it brought, it does not build.
		args := append([]string{"-C", root, "-o", "build", "install",
			"HOME=" + home, "PREFIX=" + prefix, "INSTALL_BINARIES=" + strings.Join(bins, " ")}, extra...)
		if out, err := exec.Command(mk, args...).CombinedOutput(); err != nil {
			t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	install()
	install() // twice in a row: nothing is listed twice or left behind
	defaultInstall(t, mk, root, self)

	unitDir := filepath.Join(home, ".config", "systemd", "user")
	for _, name := range []string{"ctxd", "ctxctl"} {
		st, err := os.Stat(filepath.Join(prefix, "bin", name))
		if err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("installed %s: %v %v, want mode 0755", name, st, err)
		}
	}
	service, err := os.ReadFile(filepath.Join(unitDir, "ctxd.service"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "\nExecStart=\"" + filepath.Join(prefix, "bin", "ctxd") + "\"\n"; !strings.Contains(string(service), want) {
		t.Errorf("installed ctxd.service lacks %q:\n%s", want, service)
	}
	for _, want := range []string{"\nType=notify\n", "\nWatchdogSec=", "\nRestart=on-failure\n", "\nNoNewPrivileges=yes\n"} {
		if !strings.Contains(string(service), want) {
			t.Errorf("installed ctxd.service lacks %q", want)
		}
	}
	socket, err := os.ReadFile(filepath.Join(unitDir, "ctxd.socket"))
	if err != nil {
		t.Fatal(err)
	}
	orig, _ := os.ReadFile(filepath.Join(root, "deploy", "systemd", "ctxd.socket"))
	if !bytes.Equal(socket, orig) {
		t.Error("installed ctxd.socket differs from deploy/systemd/ctxd.socket")
	}
	for _, want := range []string{"ListenStream=%t/ctxd/ctxd.sock", "SocketMode=0600", "DirectoryMode=0700"} {
		if !strings.Contains(string(socket), want) {
			t.Errorf("ctxd.socket lacks %q", want)
		}
	}

	// UNITDIR overrides the unit folder.
	other := filepath.Join(tmp, "units")
	install("UNITDIR=" + other)
	for _, name := range []string{"ctxd.service", "ctxd.socket"} {
		if _, err := os.Stat(filepath.Join(other, name)); err != nil {
			t.Errorf("UNITDIR=%s: %v", other, err)
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (apt-get install systemd): installed units not verified")
	}
	verify := exec.Command(analyze, "--user", "verify", filepath.Join(unitDir, "ctxd.service"), filepath.Join(unitDir, "ctxd.socket"))
	verify.Env = append(os.Environ(), "HOME="+home, "XDG_RUNTIME_DIR="+runtime, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	out, err := verify.CombinedOutput()
	// verify reports warnings (unknown keys, bad values) without failing:
	// any output is a finding.
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze --user verify: %v\n%s", err, out)
	}
}

// defaultInstall runs make install twice in a row with the default binary
// list, as after make build or make run, when bin/ holds every binary
// (ctxtrace once listed twice made install(1) refuse: "will not overwrite
// just-created ..."). It runs a copy of the Makefile in a scratch tree whose
// bin/ holds copies of self, so nothing is built.
func defaultInstall(t *testing.T, mk, root string, self []byte) {
	t.Helper()
	tree := t.TempDir()
	home, prefix := filepath.Join(tree, "home"), filepath.Join(tree, "prefix")
	for _, dir := range []string{"bin", "deploy/systemd"} {
		if err := os.MkdirAll(filepath.Join(tree, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"Makefile", "deploy/systemd/ctxd.service", "deploy/systemd/ctxd.socket"} {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tree, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"ctxd", "ctxctl", "ctxtrace"}
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(tree, "bin", name), self, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		args := []string{"-C", tree, "-o", "build", "install", "HOME=" + home, "PREFIX=" + prefix}
		if out, err := exec.Command(mk, args...).CombinedOutput(); err != nil {
			t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, name := range names {
		if st, err := os.Stat(filepath.Join(prefix, "bin", name)); err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("default make install: %s: %v %v, want mode 0755", name, st, err)
		}
	}
}
