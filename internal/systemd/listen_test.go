package systemd

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The activation tests run this test binary as the activated process,
// exec'd by "sh -c 'LISTEN_PID=$$ exec ...'" so that LISTEN_PID names it
// the way a service manager does; envHelper selects the helper.
const envHelper = "CTXD_SYSTEMD_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(envHelper) == "listeners" {
		os.Exit(listenersHelper())
	}
	os.Exit(m.Run())
}

// listenersHelper reports what Listeners returned on stdout, one
// key=value a line, then accepts one connection on each listener and
// writes the listener's name to it.
func listenersHelper() int {
	lns, err := Listeners()
	var names []string
	cloexec := true
	for _, l := range lns {
		names = append(names, l.Name)
		f, ferr := l.Listener.(*net.UnixListener).SyscallConn()
		if ferr != nil {
			cloexec = false
			continue
		}
		f.Control(func(fd uintptr) {
			flags, err := unix.FcntlInt(fd, unix.F_GETFD, 0)
			if err != nil || flags&unix.FD_CLOEXEC == 0 {
				cloexec = false
			}
		})
	}
	fmt.Printf("count=%d\n", len(lns))
	fmt.Printf("names=%s\n", strings.Join(names, ","))
	fmt.Printf("env=%s|%s|%s\n", os.Getenv(EnvListenPID), os.Getenv(EnvListenFDs), os.Getenv(EnvListenFDNames))
	fmt.Printf("cloexec=%v\n", cloexec)
	fmt.Printf("notlistener=%v\n", errors.Is(err, ErrNotListener))
	fmt.Printf("environment=%v\n", errors.Is(err, ErrEnvironment))
	if err != nil {
		fmt.Printf("err=%v\n", err)
	}
	fmt.Println("end")
	os.Stdout.Sync()
	for _, l := range lns {
		c, err := l.Listener.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		io.WriteString(c, l.Name)
		c.Close()
		l.Listener.Close()
	}
	return 0
}

type activation struct {
	files []*os.File // passed from descriptor 3 on
	env   []string   // LISTEN_FDS, LISTEN_FDNAMES...
	pid   string     // LISTEN_PID: "$$" is the activated process itself
}

// activate runs the helper with a.files as descriptors 3, 4... and returns
// its report, parsed, with the process still running.
func activate(t *testing.T, a activation) (map[string]string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command("sh", "-c", `LISTEN_PID=`+a.pid+` exec "$0"`, os.Args[0])
	cmd.Env = append(os.Environ(), envHelper+"=listeners")
	cmd.Env = append(cmd.Env, a.env...)
	cmd.ExtraFiles = a.files
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	report := map[string]string{}
	var buf strings.Builder
	b := make([]byte, 1)
	for !strings.HasSuffix(buf.String(), "end\n") {
		if _, err := out.Read(b); err != nil {
			t.Fatalf("helper report cut short (%v): %q", err, buf.String())
		}
		buf.Write(b)
	}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			report[k] = v
		}
	}
	return report, cmd
}

func unixListenerFile(t *testing.T, path string) *os.File {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close() // the file is a duplicate; closing l does not unlink it twice
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	f, err := l.(*net.UnixListener).File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestListenersFromActivation(t *testing.T) {
	dir := t.TempDir()
	paths := []string{filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")}
	files := []*os.File{unixListenerFile(t, paths[0]), unixListenerFile(t, paths[1])}
	report, cmd := activate(t, activation{
		files: files, pid: "$$",
		env: []string{EnvListenFDs + "=2", EnvListenFDNames + "=ctxd.socket:second"},
	})
	want := map[string]string{"count": "2", "names": "ctxd.socket,second", "env": "||", "cloexec": "true", "notlistener": "false", "environment": "false"}
	for k, v := range want {
		if report[k] != v {
			t.Errorf("%s=%q, want %q (report %v)", k, report[k], v, report)
		}
	}
	// The helper serves on the very sockets we bound.
	for i, p := range paths {
		c, err := net.DialTimeout("unix", p, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(got) != strings.Split(want["names"], ",")[i] {
			t.Errorf("%s answered %q %v", p, got, err)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("helper: %v", err)
	}
}

func TestListenersIgnoreAnotherProcess(t *testing.T) {
	f := unixListenerFile(t, filepath.Join(t.TempDir(), "a.sock"))
	report, _ := activate(t, activation{files: []*os.File{f}, pid: "1", env: []string{EnvListenFDs + "=1"}})
	if report["count"] != "0" || report["env"] != "||" || report["err"] != "" {
		t.Errorf("LISTEN_PID of another process: %v, want no listeners, no error, variables unset", report)
	}
}

func TestListenersRejectBadDescriptors(t *testing.T) {
	dir := t.TempDir()
	dgram, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "d.sock"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer dgram.Close()
	df, err := dgram.File()
	if err != nil {
		t.Fatal(err)
	}
	defer df.Close()
	lf := unixListenerFile(t, filepath.Join(dir, "l.sock"))

	report, _ := activate(t, activation{files: []*os.File{lf, df}, pid: "$$", env: []string{EnvListenFDs + "=2"}})
	if report["notlistener"] != "true" || report["count"] != "0" || report["env"] != "||" {
		t.Errorf("datagram socket: %v, want ErrNotListener and nothing open", report)
	}

	cases := map[string]activation{
		"more fds than passed":  {files: []*os.File{lf}, pid: "$$", env: []string{EnvListenFDs + "=500"}},
		"names count mismatch":  {files: []*os.File{lf}, pid: "$$", env: []string{EnvListenFDs + "=1", EnvListenFDNames + "=a:b"}},
		"LISTEN_FDS not number": {files: []*os.File{lf}, pid: "$$", env: []string{EnvListenFDs + "=one"}},
		"LISTEN_PID not number": {files: []*os.File{lf}, pid: "init", env: []string{EnvListenFDs + "=1"}},
	}
	for name, a := range cases {
		t.Run(name, func(t *testing.T) {
			report, _ := activate(t, a)
			if report["environment"] != "true" || report["count"] != "0" || report["env"] != "||" {
				t.Errorf("%v, want ErrEnvironment, no listeners, variables unset", report)
			}
		})
	}
}

func TestListenFilesWithoutActivation(t *testing.T) {
	t.Setenv(EnvListenPID, "")
	t.Setenv(EnvListenFDs, "")
	files, err := ListenFiles()
	if err != nil || len(files) != 0 {
		t.Fatalf("no activation: %v %v", files, err)
	}
}
