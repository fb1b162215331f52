package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/tools/ctxtrace/hist"
)

// metricsJSON is `ctxctl metrics --json`.
type metricsJSON struct {
	PID         int                `json:"pid"`
	Executable  string             `json:"executable"`
	Values      map[string]float64 `json:"values"`  // counters and gauges
	Timings     []hist.ProbeReport `json:"timings"` // Go-side log2 histograms
	ArenaRanges []arenaRangeJSON   `json:"arena_ranges"`
}

type arenaRangeJSON struct {
	Start string `json:"start"`
	End   string `json:"end"`
	Path  string `json:"path"`
}

// cmdMetrics prints ctxd's metrics: the Prometheus text exposition, or
// with --json the values, the timings with percentiles and the arena's
// address ranges.
func cmdMetrics(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("metrics", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON: values, timings (count, p50_us, p99_us, buckets), arena ranges")
	m, err := cli.Query(ctx, e, fs, args, func(c *client.Client) (client.Metrics, error) {
		return c.Metrics(ctx, client.MetricsOptions{NoText: *asJSON})
	})
	if err != nil {
		return err
	}
	if !*asJSON {
		_, err := io.WriteString(e.Stdout, m.PrometheusText)
		return err
	}
	out := metricsJSON{PID: m.PID, Executable: m.Executable, Values: m.Values,
		Timings: []hist.ProbeReport{}, ArenaRanges: []arenaRangeJSON{}}
	for _, h := range m.Histograms {
		out.Timings = append(out.Timings, hist.ProbeReportOf(hist.HistFromMetrics(h)))
	}
	for _, r := range m.ArenaRanges {
		out.ArenaRanges = append(out.ArenaRanges, arenaRangeJSON{
			Start: fmt.Sprintf("%#x", r.Start), End: fmt.Sprintf("%#x", r.End), Path: r.Path})
	}
	return e.PrintJSON(out)
}
