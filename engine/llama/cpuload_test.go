package llama

import (
	"context"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/engine"
)

const procStatSample = `cpu  1000 500 300 9000 20 10 5 40 0 0
cpu0 500 250 150 4500 10 5 2 20 0 0
cpu1 500 250 150 4500 10 5 3 20 0 0
intr 12345 0 0
ctxt 99
procs_running 3
procs_blocked 0
`

func TestParseProcStat(t *testing.T) {
	got, ok := parseProcStat([]byte(procStatSample), false)
	want := cpuTimes{busy: 1000 + 300 + 10 + 5, total: 1000 + 500 + 300 + 9000 + 20 + 10 + 5 + 40, cpus: 2, running: 3}
	if !ok || got != want {
		t.Fatalf("parseProcStat = %+v %v, want %+v", got, ok, want)
	}
	if got, _ := parseProcStat([]byte(procStatSample), true); got.busy != want.busy+500 {
		t.Fatalf("niced: busy %d, want %d", got.busy, want.busy+500)
	}
	for _, bad := range []string{"", "cpu 1 2 3\nprocs_running 1\ncpu0 1\n", "cpu  1 2 3 4 5 6 7 8\ncpu0 1\n", "cpu  1 2 x 4 5 6 7 8\ncpu0 1\nprocs_running 1\n"} {
		if _, ok := parseProcStat([]byte(bad), false); ok {
			t.Errorf("parseProcStat(%q) accepted", bad)
		}
	}
}

func TestParseSelfStat(t *testing.T) {
	line := "4242 (ctx d) (x)) R 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 5 12 0 100 0 0\n"
	ticks, nice, ok := parseSelfStat([]byte(line))
	if !ok || ticks != 325 || nice != 5 {
		t.Fatalf("parseSelfStat = %d %d %v, want 325 5 true", ticks, nice, ok)
	}
	if threadState([]byte(line)) != 'R' || threadState([]byte("1 (a) S 0")) != 'S' || threadState([]byte("garbage")) != 0 {
		t.Fatal("threadState misread a state")
	}
	if _, _, ok := parseSelfStat([]byte("1 (a) R 1 2")); ok {
		t.Fatal("a short line was accepted")
	}
}

// fakeProc serves scripted /proc reads.
type fakeProc struct {
	times []cpuTimes
	own   int
	reads int
}

func (f *fakeProc) read() (cpuTimes, bool) {
	t := f.times[min(f.reads, len(f.times)-1)]
	f.reads++
	return t, true
}

func (f *fakeProc) ownRun() (int, bool) { return f.own, true }

func TestCPULoadExcludesOwnThreads(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// First call: instantaneous. 4 runnable, 3 of them ours (two ggml
	// threads spinning and the reader): one other; the least of three
	// reads (a kworker blinked in the first) counts.
	f := &fakeProc{own: 3, times: []cpuTimes{
		{running: 5, cpus: 2, total: 1000},
		{running: 4, cpus: 2, total: 1000},
		{running: 4, cpus: 2, total: 1000},
	}}
	l := cpuLoad{read: f.read, ownRun: f.ownRun}
	if o, ok := l.sample(t0); !ok || o != 1 {
		t.Fatalf("instant sample = %v %v, want 1 other", o, ok)
	}
	// Within loadEvery: the same answer, no read.
	reads := f.reads
	if o, _ := l.sample(t0.Add(100 * time.Millisecond)); o != 1 || f.reads != reads {
		t.Fatalf("a sample within loadEvery read /proc again (%d reads) or changed (%v)", f.reads-reads, o)
	}
	// One second later: 200 ticks of wall on two CPUs; the machine was
	// busy 190 ticks, 180 of them ours: others used 0.1 core.
	f.times = []cpuTimes{{running: 3, cpus: 2, total: 1200, busy: 190, self: 180}}
	f.reads = 0
	if o, ok := l.sample(t0.Add(time.Second)); !ok || math.Abs(o-0.1) > 1e-9 {
		t.Fatalf("interval sample = %v %v, want 0.1", o, ok)
	}
	// A busy process beside our two threads: of 30 ticks per CPU, the
	// machine was busy all 60, 40 of them ours; it got 2/3 of a core.
	f.times = []cpuTimes{{running: 3, cpus: 2, total: 1260, busy: 250, self: 220}}
	f.reads = 0
	if o, _ := l.sample(t0.Add(1300 * time.Millisecond)); math.Abs(o-2.0/3) > 1e-9 {
		t.Fatalf("busy neighbour = %v cores, want 2/3", o)
	}
	// After an idle spell longer than loadStale: instantaneous again.
	f.times = []cpuTimes{{running: 2, cpus: 2, total: 5000, busy: 900, self: 300}}
	f.reads = 0
	f.own = 2
	if o, ok := l.sample(t0.Add(time.Minute)); !ok || o != 0 || f.reads != 3 {
		t.Fatalf("after idle: %v %v with %d reads, want 0 others from three instant reads", o, ok, f.reads)
	}
}

func TestCPULoadUnreadable(t *testing.T) {
	l := cpuLoad{read: func() (cpuTimes, bool) { return cpuTimes{}, false }}
	if _, ok := l.sample(time.Unix(5, 0)); ok {
		t.Fatal("an unreadable /proc was reported as measured")
	}
}

// TestCPULoadReadsThisMachine checks the real readers agree with
// themselves: this process's own running thread is never another's.
func TestCPULoadReadsThisMachine(t *testing.T) {
	ct, ok := readCPUTimes()
	if !ok {
		t.Skip("no /proc here")
	}
	if ct.cpus < 1 || ct.total == 0 || ct.running < 1 {
		t.Fatalf("implausible /proc/stat: %+v", ct)
	}
	own, ok := ownRunnable()
	if !ok || own < 1 {
		t.Fatalf("ownRunnable = %d %v: the reading thread itself is runnable", own, ok)
	}
}

// A context reports how it chose its threads: adaptive by default,
// exactly the pinned count with ThreadsPinned.
func TestContextThreadsReason(t *testing.T) {
	m := loadStories(t)
	toks, err := m.Tokenize("Once upon a time there was a little girl", true)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts engine.ContextOptions
		want string
	}{
		{engine.ContextOptions{ContextTokens: 256, BatchTokens: 64, Threads: 2, DecodeThreads: 1}, "auto"},
		{engine.ContextOptions{ContextTokens: 256, BatchTokens: 64, Threads: 1, DecodeThreads: 1, ThreadsPinned: true}, "pinned by --threads"},
	} {
		c, err := m.newContext(tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		greedy(t, c, toks, 0, 2)
		why := c.ThreadsReason()
		if c.Threads() < 1 || !strings.Contains(why, "batches ") || !strings.Contains(why, "single tokens ") || !strings.Contains(why, tc.want) {
			t.Errorf("%+v: %d threads, reason %q, want one with %q", tc.opts, c.Threads(), why, tc.want)
		}
		if m.facts.Placement.GPULayers == 0 && tc.opts.ThreadsPinned && c.Threads() != 1 {
			t.Errorf("pinned to 1: ran %d", c.Threads())
		}
		c.Close()
	}
}

// TestOneThreadPoolDecodesAlike: a context of two threads whose calls
// choose one (another process holds a core) runs them on its worker-less
// one-thread pool, and back on the full pool when the core is free again;
// the tokens are those of a context pinned to one thread, whichever pool
// ran each call.
func TestOneThreadPoolDecodesAlike(t *testing.T) {
	m := loadStories(t)
	if m.facts.Placement.GPULayers > 0 || runtime.NumCPU() < 2 {
		t.Skip("needs the CPU backend and two CPUs")
	}
	toks, err := m.Tokenize("Once upon a time there was a little girl", true)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := m.newContext(engine.ContextOptions{ContextTokens: 256, BatchTokens: 64, Threads: 1, DecodeThreads: 1, ThreadsPinned: true})
	if err != nil {
		t.Fatal(err)
	}
	want := greedy(t, ref, toks, 0, 12)
	ref.Close()

	c, err := m.newContext(engine.ContextOptions{ContextTokens: 256, BatchTokens: 64, Threads: 2, DecodeThreads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.pool1 == nil {
		t.Fatal("a two-thread context has no one-thread pool")
	}
	others := 0
	c.load = cpuLoad{
		read:   func() (cpuTimes, bool) { return cpuTimes{busy: 1, total: 2, cpus: 2, running: others}, true },
		ownRun: func() (int, bool) { return 0, true },
	}
	// Each call samples afresh (the instant count of other runnable
	// threads): busy, idle, busy, ... call after call.
	ctx := context.Background()
	decode := func(tokens []engine.Token, pos int) int {
		c.load.prevAt = time.Time{}
		if err := c.Decode(ctx, tokens, pos); err != nil {
			t.Fatal(err)
		}
		return c.Threads()
	}
	busy := runtime.NumCPU() // other processes want every core: one thread
	others = busy
	if n := decode(toks, 0); n != 1 {
		t.Fatalf("beside a busy process: %d threads, want 1", n)
	}
	s, err := c.NewSampler(engine.SamplingParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []engine.Token
	used := map[int]bool{}
	for i := range 12 {
		tok := c.Sample(s)
		got = append(got, tok)
		others = busy * ((i + 1) % 2)
		used[decode([]engine.Token{tok}, len(toks)+i)] = true
	}
	if !used[1] || !used[2] {
		t.Fatalf("calls ran on %v threads, want both 1 and 2", used)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("tokens %v across the two pools, want %v (one thread throughout)", got, want)
	}
}
