//go:build linux && amd64

package ctxtrace

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/internal/testmodel"
)

// The tests trace a real daemon: testdata/tracee, a sidecar built as its
// own executable (go test binaries carry no symbol table, and the uprobes
// need one), serving needle.gguf in hot-set mode so that long prompts park
// blocks in the arena and a query brings them back.

var traceeBuild struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if traceeBuild.dir != "" {
		os.RemoveAll(traceeBuild.dir)
	}
	os.Exit(code)
}

func buildTracee(t *testing.T) string {
	t.Helper()
	b := &traceeBuild
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "ctxtrace-test-"); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "tracee")
		cmd := exec.Command("go", "build", "-o", b.path, "./testdata/tracee")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("building the tracee: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

type tracee struct {
	exe, socket, ioFile string
	cmd                 *exec.Cmd
	lines               *bufio.Scanner
}

func startTracee(t *testing.T) *tracee {
	t.Helper()
	exe := buildTracee(t)
	dir := t.TempDir()
	tr := &tracee{exe: exe, socket: filepath.Join(dir, "ctxd.sock"), ioFile: filepath.Join(dir, "io.bin")}
	tr.cmd = exec.Command(exe, "--model", testmodel.Needle(t), "--socket", tr.socket,
		"--data-dir", filepath.Join(dir, "data"), "--io-file", tr.ioFile)
	tr.cmd.Stderr = os.Stderr
	stdin, err := tr.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := tr.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	tr.lines = bufio.NewScanner(stdout)
	if err := tr.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // the tracee stops when stdin closes
		done := make(chan struct{})
		go func() { tr.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			tr.cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := client.Dial(context.Background(), tr.socket)
		if err == nil {
			c.Close()
			return tr
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tracee never served %s: %v", tr.socket, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// doIO makes the tracee pwrite, fsync, fdatasync and pread once.
func (tr *tracee) doIO(t *testing.T) {
	t.Helper()
	if err := tr.cmd.Process.Signal(unix.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if !tr.lines.Scan() || tr.lines.Text() != "io done" {
		t.Fatalf("tracee I/O: %q %v", tr.lines.Text(), tr.lines.Err())
	}
}

// recallTurn streams a haystack of far+64 tokens with a needle after 40,
// then asks with the needle's first tokens: blocks are parked while the
// haystack streams in, and the query brings the needle's block back.
func recallTurn(t *testing.T, socket string, seed int64, far int) {
	t.Helper()
	ctx := context.Background()
	c, err := client.Dial(ctx, socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rng := rand.New(rand.NewSource(seed))
	tok := func() int32 { return int32(3 + rng.Intn(509)) }
	var hay, needle []int32
	for i := 0; i < 24; i++ {
		needle = append(needle, tok())
	}
	for i := 0; i < 40; i++ {
		hay = append(hay, tok())
	}
	hay = append(hay, needle...)
	for i := 0; i < far; i++ {
		hay = append(hay, tok())
	}
	s, err := c.OpenSession(ctx, "ctxtrace-test")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	m := client.Manifest{Segments: []client.Segment{{ID: "hay", Kind: client.KindTerminal, Tokens: hay, Stable: true}}}
	if _, err := s.EnsurePrefix(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PrefillSuffix(ctx, client.Segment{ID: "q", Kind: client.KindUserTurn, Tokens: needle[:4]}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Decode(ctx, client.DecodeOptions{MaxTokens: 8}, nil); err != nil {
		t.Fatal(err)
	}
}

// requireProbes skips, with the exact reason, unless this process may load
// and attach the probes. As root it mounts tracefs if it is missing (the
// documented prerequisite of the block and page-fault tracepoints).
func requireProbes(t *testing.T) {
	t.Helper()
	caps, err := EffectiveCapabilities()
	if err != nil {
		t.Skipf("eBPF probes not tested: %v", err)
	}
	if !TracefsMounted() && caps.Has(capSysAdmin) {
		if err := unix.Mount("nodev", "/sys/kernel/tracing", "tracefs", 0, ""); err != nil {
			t.Logf("mounting tracefs: %v", err)
		} else {
			t.Log("mounted tracefs at /sys/kernel/tracing")
		}
	}
	if missing := Preflight(""); len(missing) > 0 {
		t.Skipf("eBPF probes not tested: %s", strings.Join(missing, "; "))
	}
}

func probeCount(t *testing.T, hs []Hist, name string) uint64 {
	t.Helper()
	for _, h := range hs {
		if h.Name == name {
			return h.Count
		}
	}
	t.Fatalf("no probe %q", name)
	return 0
}

func goSideCount(t *testing.T, socket, name string) uint64 {
	t.Helper()
	c, err := client.Dial(context.Background(), socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := c.Metrics(context.Background(), client.MetricsOptions{NoText: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range m.Histograms {
		if h.Name == name {
			return h.Count
		}
	}
	t.Fatalf("ctxd reports no timing %q", name)
	return 0
}

// TestProbesOnRealCtxd attaches every probe group to a running daemon and
// checks each histogram against what the workload did.
func TestProbesOnRealCtxd(t *testing.T) {
	requireProbes(t)
	tc := startTracee(t)
	// A first turn creates the arena's region file.
	recallTurn(t, tc.socket, 1, 600)
	lookups0 := goSideCount(t, tc.socket, "fetch_phase.arena_lookup")
	inserts0 := goSideCount(t, tc.socket, "fetch_phase.engine_insert")

	tr, err := Attach(Target{PID: tc.cmd.Process.Pid, Executable: tc.exe})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if len(tr.Skipped()) > 0 {
		t.Fatalf("probe groups did not attach: %q", tr.Skipped())
	}
	c, err := client.Dial(context.Background(), tc.socket)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Metrics(context.Background(), client.MetricsOptions{NoText: true})
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.ArenaRanges) == 0 || m.PID != tc.cmd.Process.Pid {
		t.Fatalf("metrics: pid %d, ranges %v", m.PID, m.ArenaRanges)
	}
	if err := tr.SetArenaRanges(RangesFromMetrics(m.ArenaRanges)); err != nil {
		t.Fatal(err)
	}

	tc.doIO(t)
	// A longer second turn parks blocks in fresh arena pages (page faults)
	// and fetches the needle's block back (fetch phases).
	recallTurn(t, tc.socket, 2, 2000)

	hs, err := tr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		t.Logf("%-26s %6d events, p50 %8.2f µs, p99 %8.2f µs", h.Name, h.Count, h.Quantile(0.5)/1e3, h.Quantile(0.99)/1e3)
	}
	// Socket traffic: every call reads and writes.
	for _, name := range []string{"read", "write", "pread64", "pwrite64", "fsync", "fdatasync"} {
		if probeCount(t, hs, name) == 0 {
			t.Errorf("%s: no events", name)
		}
	}
	if n := probeCount(t, hs, "page_fault.arena_write") + probeCount(t, hs, "page_fault.arena_read"); n == 0 {
		t.Error("no page faults inside the arena while blocks were parked in fresh pages")
	}
	// The uprobes see exactly the fetches the Go side timed.
	lookups := goSideCount(t, tc.socket, "fetch_phase.arena_lookup") - lookups0
	inserts := goSideCount(t, tc.socket, "fetch_phase.engine_insert") - inserts0
	if lookups == 0 {
		t.Fatal("the workload fetched no block back")
	}
	if got := probeCount(t, hs, "fetch_phase.arena_lookup"); got != lookups {
		t.Errorf("uprobes saw %d arena lookups, ctxd timed %d", got, lookups)
	}
	if got := probeCount(t, hs, "fetch_phase.engine_insert"); got != inserts {
		t.Errorf("uprobes saw %d engine inserts, ctxd timed %d", got, inserts)
	}
	if cpu := tr.ProbeCPU(); cpu != nil {
		t.Logf("probe cost: %d runs, %.2f ms", cpu.Runs, float64(cpu.RunTimeNs)/1e6)
	}
}

// runWhile runs Run with o until work is done, then stops it.
func runWhile(t *testing.T, o Options, work func()) Report {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	o.Started = func() { close(started) }
	type result struct {
		r   Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := Run(ctx, o)
		done <- result{r, err}
	}()
	select {
	case <-started:
	case res := <-done:
		t.Fatalf("Run ended before starting: %v", res.err)
	}
	work()
	cancel()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	return res.r
}

// TestRunTracesOverTheSocket is the command's path: pid, executable and
// arena ranges from the socket (refreshed as regions appear), eBPF
// histograms at the end.
func TestRunTracesOverTheSocket(t *testing.T) {
	requireProbes(t)
	tc := startTracee(t)
	var notices strings.Builder
	r := runWhile(t, Options{Socket: tc.socket, RangeRefresh: 50 * time.Millisecond, Notices: &notices}, func() {
		recallTurn(t, tc.socket, 3, 300) // creates the region file
		time.Sleep(200 * time.Millisecond)
		tc.doIO(t)
		recallTurn(t, tc.socket, 4, 2000)
	})
	if r.Source != SourceEBPF || r.PID != tc.cmd.Process.Pid || len(r.Skipped) > 0 {
		t.Fatalf("report: source %s pid %d skipped %q; notices %s", r.Source, r.PID, r.Skipped, notices.String())
	}
	for _, name := range []string{"read", "write", "pread64", "fsync", "fetch_phase.arena_lookup", "fetch_phase.engine_insert"} {
		p, ok := r.Probe(name)
		if !ok || p.Count == 0 || p.P50us <= 0 || p.P99us < p.P50us || len(p.Buckets) == 0 {
			t.Errorf("%s: %+v", name, p)
		}
	}
	pw, _ := r.Probe("page_fault.arena_write")
	pr, _ := r.Probe("page_fault.arena_read")
	if pw.Count+pr.Count == 0 {
		t.Error("no arena page faults: the ranges from the socket did not reach the probe")
	}
	var buf strings.Builder
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + buf.String())
}

// TestRunGoSideFallback: without probes, Run reports ctxd's own timings of
// the same window.
func TestRunGoSideFallback(t *testing.T) {
	tc := startTracee(t)
	recallTurn(t, tc.socket, 5, 300) // before the window: not counted
	before := goSideCount(t, tc.socket, "fetch_phase.arena_lookup")
	r := runWhile(t, Options{Socket: tc.socket, GoSideOnly: true, Notices: io.Discard}, func() {
		recallTurn(t, tc.socket, 6, 1500)
	})
	after := goSideCount(t, tc.socket, "fetch_phase.arena_lookup")
	if r.Source != SourceGoSide || r.PID != tc.cmd.Process.Pid {
		t.Fatalf("report: %+v", r)
	}
	p, ok := r.Probe("fetch_phase.arena_lookup")
	if !ok || p.Count != after-before || p.Count == 0 || p.P50us <= 0 {
		t.Fatalf("arena lookups in the window: %+v, ctxd counted %d", p, after-before)
	}
	for _, name := range []string{"fetch_phase.engine_insert", "fetch.arena", "request.ensure_prefix"} {
		if p, ok := r.Probe(name); !ok || p.Count == 0 {
			t.Errorf("%s: %+v", name, p)
		}
	}
	if _, ok := r.Probe("read"); ok {
		t.Error("the Go-side report cannot have syscall histograms")
	}
}

// TestEntryOffsetsInCtxd reads the real functions the uprobes use: the
// markers are prologue-free leaves (offset 0); a function with a stack
// check gets the offset just past its JBE.
func TestEntryOffsetsInCtxd(t *testing.T) {
	exe := buildTracee(t)
	for _, sym := range []string{symPhaseBegin, symPhaseEnd} {
		code, err := symbolCode(exe, sym)
		if err != nil {
			t.Fatal(err)
		}
		if off := entryOffset(code); off != 0 || code[0] != 0xc3 {
			t.Fatalf("%s: offset %d, code % x: want a lone RET at offset 0", sym, off, code)
		}
	}
	code, err := symbolCode(exe, "github.com/ctxd/ctxd/sidecar.(*metrics).beginPhase")
	if err != nil {
		t.Fatal(err)
	}
	off := entryOffset(code)
	if off == 0 || off > 20 || !(code[off-2] == 0x76 || (code[off-6] == 0x0f && code[off-5] == 0x86)) {
		t.Fatalf("beginPhase: offset %d after % x", off, code[:min(len(code), 24)])
	}
	if _, err := symbolCode(exe, "no.such.function"); err == nil || !strings.Contains(err.Error(), "no function symbol") {
		t.Fatalf("missing symbol: %v", err)
	}
}
