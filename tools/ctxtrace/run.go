package ctxtrace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/protocol"
)

// Options configure Run.
type Options struct {
	// PID is the ctxd process to trace; 0 takes it from Socket.
	PID int
	// Socket is ctxd's socket: where the pid, the arena's address ranges
	// and the Go-side timings come from. Empty with PID set: the arena
	// ranges come from /proc/PID/maps, and without probes there is no
	// fallback.
	Socket string
	// Duration of the trace; 0 traces until ctx ends.
	Duration time.Duration
	// GoSideOnly skips the eBPF probes: the Go-side timings only.
	GoSideOnly bool
	// RangeRefresh is how often the arena's ranges are re-read (they
	// change as region files are added); 0 = one second.
	RangeRefresh time.Duration
	// Notices receives what the user should know while tracing (missing
	// privileges, the fallback, probe groups that did not attach).
	Notices io.Writer
	// Started, when set, is called once measuring has begun: the probes
	// are attached, or the first Go-side reading is taken.
	Started func()
}

// ErrNoTarget: neither a pid nor a socket was given.
var ErrNoTarget = errors.New("ctxtrace: name ctxd with --pid PID or --socket PATH")

// Run traces ctxd for the duration (or until ctx ends) and reports the
// histograms: from eBPF probes when it may load them, else — after saying
// exactly what is missing — from ctxd's Go-side timings over the socket.
func Run(ctx context.Context, o Options) (Report, error) {
	if o.PID == 0 && o.Socket == "" {
		return Report{}, ErrNoTarget
	}
	if o.RangeRefresh <= 0 {
		o.RangeRefresh = time.Second
	}
	if o.Notices == nil {
		o.Notices = io.Discard
	}
	var c *client.Client
	var first *client.Metrics
	if o.Socket != "" {
		var err error
		if c, err = client.Dial(ctx, o.Socket, client.Options{Name: "ctxtrace"}); err != nil {
			return Report{}, err
		}
		defer c.Close()
		m, err := c.Metrics(ctx, client.MetricsOptions{NoText: true})
		if err != nil {
			return Report{}, fmt.Errorf("ctxtrace: asking ctxd for its pid and arena: %w", err)
		}
		first = &m
		if o.PID != 0 && o.PID != first.PID {
			return Report{}, fmt.Errorf("ctxtrace: --pid %d but the daemon on %s is pid %d", o.PID, o.Socket, first.PID)
		}
		o.PID = first.PID
	}
	if !o.GoSideOnly {
		var exe string
		if first != nil {
			exe = first.Executable
		}
		r, err := traceEBPF(ctx, o, c, exe, first)
		if err == nil {
			return r, nil
		}
		var pe *PrivilegeError
		errors.As(err, &pe)
		if c == nil {
			return Report{}, fmt.Errorf("%w; and without --socket there are no Go-side timings to fall back on", err)
		}
		fmt.Fprintf(o.Notices, "ctxtrace: %v\nctxtrace: falling back to ctxd's Go-side timings over %s (no syscall, block-request or page-fault histograms)\n", err, o.Socket)
		r, ferr := traceGoSide(ctx, o, c, first)
		if pe != nil {
			r.Missing = pe.Missing
		} else {
			r.Missing = []string{err.Error()}
		}
		return r, ferr
	}
	if c == nil {
		return Report{}, errors.New("ctxtrace: Go-side timings need --socket")
	}
	return traceGoSide(ctx, o, c, first)
}

// wait sleeps for the duration (or until ctx ends), calling tick every
// period; it returns the time waited.
func wait(ctx context.Context, d, period time.Duration, tick func()) time.Duration {
	start := time.Now()
	var deadline <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		deadline = t.C
	}
	tk := time.NewTicker(period)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return time.Since(start)
		case <-deadline:
			return time.Since(start)
		case <-tk.C:
			tick()
		}
	}
}

func traceEBPF(ctx context.Context, o Options, c *client.Client, exe string, first *client.Metrics) (Report, error) {
	tr, err := Attach(Target{PID: o.PID, Executable: exe})
	if err != nil {
		return Report{}, err
	}
	defer tr.Close()
	for _, s := range tr.Skipped() {
		fmt.Fprintf(o.Notices, "ctxtrace: not traced: %s\n", s)
	}
	ranges := func() ([]Range, error) {
		if c != nil {
			m, err := c.Metrics(ctx, client.MetricsOptions{NoText: true})
			if err != nil {
				return nil, err
			}
			return RangesFromMetrics(m.ArenaRanges), nil
		}
		return ArenaRangesFromMaps(o.PID)
	}
	var last []Range
	refresh := func() {
		rs, err := ranges()
		if err != nil {
			if ctx.Err() == nil {
				fmt.Fprintf(o.Notices, "ctxtrace: arena ranges: %v\n", err)
			}
			return
		}
		if slices.Equal(rs, last) {
			return
		}
		if err := tr.SetArenaRanges(rs); err != nil {
			fmt.Fprintf(o.Notices, "%v\n", err)
		}
		last = rs
	}
	if first != nil {
		rs := RangesFromMetrics(first.ArenaRanges)
		if err := tr.SetArenaRanges(rs); err != nil {
			fmt.Fprintf(o.Notices, "%v\n", err)
		}
		last = rs
	} else {
		refresh()
	}
	if o.Started != nil {
		o.Started()
	}
	took := wait(ctx, o.Duration, o.RangeRefresh, refresh)
	hs, err := tr.Snapshot()
	if err != nil {
		return Report{}, err
	}
	r := Report{Source: SourceEBPF, PID: o.PID, DurationS: took.Seconds(), Skipped: tr.Skipped(), ProbeCPU: tr.ProbeCPU()}
	for _, h := range hs {
		r.Probes = append(r.Probes, ProbeReportOf(h))
	}
	return r, nil
}

// traceGoSide reads ctxd's Go-side timings at the start and the end and
// reports the difference.
func traceGoSide(ctx context.Context, o Options, c *client.Client, first *client.Metrics) (Report, error) {
	if first == nil {
		m, err := c.Metrics(ctx, client.MetricsOptions{NoText: true})
		if err != nil {
			return Report{}, err
		}
		first = &m
	}
	if o.Started != nil {
		o.Started()
	}
	took := wait(ctx, o.Duration, time.Hour, func() {})
	// The trace's own context may have ended (Ctrl-C): read the final
	// figures regardless.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	end, err := c.Metrics(rctx, client.MetricsOptions{NoText: true})
	if err != nil {
		return Report{}, fmt.Errorf("ctxtrace: reading ctxd's timings: %w", err)
	}
	before := map[string]Hist{}
	for _, w := range first.Histograms {
		before[w.Name] = HistFromMetrics(w)
	}
	r := Report{Source: SourceGoSide, PID: end.PID, DurationS: took.Seconds()}
	for _, w := range end.Histograms {
		h := HistFromMetrics(w)
		if b, ok := before[h.Name]; ok {
			h = h.Sub(b)
		}
		r.Probes = append(r.Probes, ProbeReportOf(h))
	}
	return r, nil
}

// DefaultSocketPath is ctxd's default socket, protocol.DefaultSocketPath
// ($XDG_RUNTIME_DIR/ctxd/ctxd.sock, else /tmp/ctxd-UID/ctxd.sock).
func DefaultSocketPath() string { return protocol.DefaultSocketPath() }
