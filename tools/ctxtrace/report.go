package ctxtrace

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Report is what one trace measured.
type Report struct {
	// Source is SourceEBPF or SourceGoSide.
	Source    string  `json:"source"`
	PID       int     `json:"pid"`
	DurationS float64 `json:"duration_s"`
	// Missing lists what the eBPF probes needed and did not have (only
	// with the Go-side fallback).
	Missing []string `json:"missing,omitempty"`
	// Skipped lists probe groups that did not attach, and why.
	Skipped []string      `json:"skipped,omitempty"`
	Probes  []ProbeReport `json:"probes"`
	// ProbeCPU is the probes' own run time in the kernel (eBPF only,
	// when BPF statistics could be enabled): their direct cost.
	ProbeCPU *ProbeCPU `json:"probe_cpu,omitempty"`
}

// ProbeCPU is what the probes cost in the kernel, from BPF run-time
// statistics (excluding the uprobe trap itself, a few µs per marker call).
type ProbeCPU struct {
	Runs      uint64                `json:"runs"`
	RunTimeNs uint64                `json:"run_time_ns"`
	Programs  map[string]ProgramCPU `json:"programs"`
}

// ProgramCPU is one program's share of ProbeCPU.
type ProgramCPU struct {
	Runs      uint64 `json:"runs"`
	RunTimeNs uint64 `json:"run_time_ns"`
}

// Report sources.
const (
	SourceEBPF   = "ebpf"
	SourceGoSide = "go-side"
)

// Probe returns the named probe's report, if present.
func (r Report) Probe(name string) (ProbeReport, bool) {
	for _, p := range r.Probes {
		if p.Name == name {
			return p, true
		}
	}
	return ProbeReport{}, false
}

// WriteJSON writes the report as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText prints each non-empty histogram as a terminal bar chart (µs
// buckets), then the names of the empty ones.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	src := "eBPF probes"
	if r.Source == SourceGoSide {
		src = "ctxd's Go-side timings (no eBPF)"
	}
	fmt.Fprintf(&b, "ctxtrace: pid %d, %s, %.1f s\n", r.PID, src, r.DurationS)
	for _, s := range r.Skipped {
		fmt.Fprintf(&b, "  not traced: %s\n", s)
	}
	if c := r.ProbeCPU; c != nil && c.Runs > 0 {
		fmt.Fprintf(&b, "  probe cost: %d runs, %.2f ms in the kernel (%.0f ns per run)\n", c.Runs, float64(c.RunTimeNs)/1e6, float64(c.RunTimeNs)/float64(c.Runs))
	}
	var empty []string
	for _, p := range r.Probes {
		if p.Count == 0 {
			empty = append(empty, p.Name)
			continue
		}
		fmt.Fprintf(&b, "\n%s — %s\n  count %d, p50 %s, p99 %s, mean %s\n", p.Name, p.What, p.Count,
			fmtUs(p.P50us), fmtUs(p.P99us), fmtUs(p.MeanUs))
		var top uint64
		for _, bk := range p.Buckets {
			top = max(top, bk.Count)
		}
		fmt.Fprintf(&b, "  %20s : %-9s %s\n", "latency", "count", "distribution")
		counts, first, last := p.Dense()
		for k := first; k <= last; k++ {
			lo, hi := BucketBounds(k)
			c := counts[k]
			bar := strings.Repeat("*", int(math.Ceil(40*float64(c)/float64(top))))
			fmt.Fprintf(&b, "  %8s -> %-8s : %-9d |%-40s|\n", fmtBound(lo), fmtBound(hi), c, bar)
		}
	}
	if len(empty) > 0 {
		fmt.Fprintf(&b, "\nno events: %s\n", strings.Join(empty, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func fmtUs(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.2f s", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.2f ms", us/1e3)
	}
	return fmt.Sprintf("%.2f µs", us)
}

// fmtBound prints a bucket edge (ns) with a unit: 512ns, 16.4µs, 1.05ms.
func fmtBound(ns float64) string {
	switch {
	case ns < 1e3:
		return fmt.Sprintf("%.0fns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%.3gµs", ns/1e3)
	case ns < 1e9:
		return fmt.Sprintf("%.3gms", ns/1e6)
	}
	return fmt.Sprintf("%.3gs", ns/1e9)
}

// WritePNG plots every non-empty histogram as its share of events per
// log2 bucket against latency (log scale).
func (r Report) WritePNG(path string) error {
	p := plot.New()
	src := "eBPF"
	if r.Source == SourceGoSide {
		src = "Go-side timings"
	}
	p.Title.Text = fmt.Sprintf("ctxtrace: pid %d, %s, %.1f s", r.PID, src, r.DurationS)
	p.X.Label.Text = "latency (µs, bucket midpoints)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Label.Text = "share of the probe's events"
	p.Legend.Top = true
	var lines []any
	for _, pr := range r.Probes {
		if pr.Count == 0 {
			continue
		}
		counts, first, last := pr.Dense()
		var pts plotter.XYs
		for k := first; k <= last; k++ {
			lo, hi := BucketBounds(k)
			c := counts[k]
			mid := math.Max((lo+hi)/2, 1) / 1e3
			pts = append(pts, plotter.XY{X: mid, Y: float64(c) / float64(pr.Count)})
		}
		lines = append(lines, fmt.Sprintf("%s (n=%d)", pr.Name, pr.Count), pts)
	}
	if len(lines) == 0 {
		return fmt.Errorf("ctxtrace: nothing to plot: every histogram is empty")
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return err
	}
	return p.Save(9*vg.Inch, 5.5*vg.Inch, path)
}
