package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

func TestRenderProgress(t *testing.T) {
	for _, c := range []struct {
		st    progressState
		width int
		want  string
	}{
		{progressState{Label: "baseline", Unit: "trials", Done: 5, Total: 20, Elapsed: 10 * time.Second}, 60,
			"baseline [██░░░░░░░░]   5/20 trials  2.0s each    ETA 30s"},
		{progressState{Label: "x", Done: 0, Total: 4}, 30,
			"x [░░░░░░░░░░░░░░]  0/4  ETA ?"},
		{progressState{Label: "reference", Unit: "windows", Done: 64, Total: 64, Elapsed: 125 * time.Second}, 60,
			"refere… [██████████]  64/64 windows  2.0s each    in 2m05s"},
		{progressState{Label: "writing m.gguf", Unit: "B", Done: 300 << 20, Total: 700 << 20, Elapsed: 3 * time.Second}, 90,
			"writing m.gguf [███████████░░░░░░░░░░░░░░░░]  300.0 MiB/700.0 MiB  100.0 MiB/s  ETA 4s"},
		{progressState{Label: "stream", Unit: "tokens", Done: 100000, Total: 200000, Elapsed: 20 * time.Second}, 64,
			"str… [█████░░░░░]  100000/200000 tokens  5000/s       ETA 20s"},
		{progressState{Label: "build", Unit: "tokens", Done: 1, Total: 10000000, Elapsed: 4000 * time.Second}, 72,
			"build [░░░░░░░░░░░░]         1/10000000 tokens  4000.0s each  ETA >99h"},
	} {
		got := renderProgress(c.st, c.width)
		if got != c.want {
			t.Errorf("render %+v at %d:\n got %q\nwant %q", c.st, c.width, got, c.want)
		}
		if n := utf8.RuneCountInString(got); n > c.width {
			t.Errorf("%q is %d columns, more than %d", got, n, c.width)
		}
	}
	// A long label is cut so the bar keeps 10 columns; a narrow terminal
	// drops the label and still shows the figures.
	long := progressState{Label: strings.Repeat("label ", 20), Unit: "trials", Done: 1, Total: 2, Elapsed: time.Second}
	got := renderProgress(long, 60)
	if utf8.RuneCountInString(got) > 60 || !strings.Contains(got, "…") || !strings.Contains(got, "[█████░░░░░]") {
		t.Fatalf("long label: %q", got)
	}
	if got := renderProgress(long, 20); !strings.HasPrefix(got, "[") || !strings.Contains(got, "1/2 trials") {
		t.Fatalf("narrow: %q", got)
	}
}

func TestFmtDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 1499 * time.Millisecond: "1s", 59 * time.Second: "59s", 61 * time.Second: "1m01s",
		3599 * time.Second: "59m59s", 3720 * time.Second: "1h02m", 400 * time.Hour: ">99h",
	} {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestProgressDrawing drives a bar on a fake clock: redraws are
// rate-limited, Clear erases the line, Done leaves the final state; a
// writer that is not a terminal, --no-progress and CTXD_NO_PROGRESS give no
// bar at all.
func TestProgressDrawing(t *testing.T) {
	var out bytes.Buffer
	clock := time.Unix(0, 0)
	p := &Progress{out: &out, width: 60, label: "t", total: 10, now: func() time.Time { return clock }}
	p.start = clock
	for i := 0; i < 5; i++ {
		clock = clock.Add(10 * time.Millisecond)
		p.Add(1)
	}
	if n := strings.Count(out.String(), "\r"); n != 1 {
		t.Fatalf("%d redraws within 50ms: %q", n, out.String())
	}
	clock = clock.Add(progressEvery)
	p.Add(1)
	p.Clear()
	if !strings.HasSuffix(out.String(), "\r\x1b[K") || p.visible {
		t.Fatalf("clear: %q", out.String())
	}
	p.Add(1) // after Clear: drawn at once
	if frame := out.String()[strings.LastIndex(out.String(), "\r"):]; !strings.Contains(frame, "7/10") {
		t.Fatalf("redraw after clear: %q", out.String())
	}
	p.Set(10)
	p.Done()
	if !strings.HasSuffix(out.String(), "10/10  66.7/s       in 0s\x1b[K\n") {
		t.Fatalf("done: %q", out.String())
	}

	var nilBar *Progress // what a disabled bar is: every method is a no-op
	nilBar.Add(1)
	nilBar.SetLabel("x")
	nilBar.Clear()
	nilBar.Done()

	e := &Env{Stderr: &out}
	if e.NewProgress("x", 10, "") != nil {
		t.Fatal("a bar on a writer that is not a terminal")
	}
	// A pseudo-terminal is a terminal: a bar of its width is drawn on it.
	tty := openPTY(t, 50)
	e = &Env{Stderr: tty}
	bar := e.NewProgress("pty", 10, "")
	if bar == nil || bar.width != 50 {
		t.Fatalf("no bar on a terminal: %+v", bar)
	}
	e.NoProgress = true
	if e.NewProgress("x", 10, "") != nil {
		t.Fatal("--no-progress ignored")
	}
	e.NoProgress = false
	t.Setenv("CTXD_NO_PROGRESS", "1")
	if e.NewProgress("x", 10, "") != nil {
		t.Fatal("CTXD_NO_PROGRESS ignored")
	}
}

// openPTY opens a pseudo-terminal of the given width and returns its
// terminal side; what is written there is discarded.
func openPTY(t *testing.T, cols uint16) *os.File {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: cols}); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, master) // keep the terminal from filling up
	return tty
}
