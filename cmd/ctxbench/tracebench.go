package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/internal/replay"
	"github.com/ctxd/ctxd/internal/trace"
	"github.com/ctxd/ctxd/tools/ctxtrace"
)

// traceBenchResult is what "bench trace" prints.
type traceBenchResult struct {
	Trace        string    `json:"trace"`
	WithoutS     []float64 `json:"without_s"`
	WithS        []float64 `json:"with_s"`
	Ratio        float64   `json:"with_over_without"` // mean with / mean without
	ProbeCPUS    float64   `json:"probe_cpu_s"`       // the probes' own kernel run time, all traced runs
	ProbeCPUFrac float64   `json:"probe_cpu_fraction"`
	Source       string    `json:"source"`
}

// benchTrace measures what ctxtrace's probes add to a replay: pairs of
// replays on a fresh ctxd process, one without and one with ctxtrace
// attached, interleaved so machine noise falls on both.
func benchTrace(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("bench trace", flag.ContinueOnError)
	model := fs.String("model", defaultModel(), "GGUF model")
	tracePath := fs.String("trace", filepath.Join(envOr("CTXD_TRACES", "../shared/traces"), "marshmallow-1867-default.traj"), "SWE-agent trajectory to replay")
	pairs := fs.Int("pairs", 3, "replay pairs (without, with)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	tr, err := trace.Load(*tracePath)
	if err != nil {
		return err
	}
	bin := siblingBinary("ctxd")
	res := traceBenchResult{Trace: *tracePath}
	var cpuNs uint64
	for i := 0; i < *pairs; i++ {
		for _, traced := range []bool{false, true} {
			secs, rep, err := tracedReplay(ctx, bin, *model, tr, traced)
			if err != nil {
				return err
			}
			if traced {
				res.WithS = append(res.WithS, secs)
				res.Source = rep.Source
				if rep.ProbeCPU != nil {
					cpuNs += rep.ProbeCPU.RunTimeNs
				}
			} else {
				res.WithoutS = append(res.WithoutS, secs)
			}
			if !*asJSON {
				fmt.Fprintf(e.Stderr, "pair %d, traced %v: %.2f s\n", i+1, traced, secs)
			}
		}
	}
	mean := func(v []float64) float64 {
		var s float64
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	res.Ratio = mean(res.WithS) / mean(res.WithoutS)
	res.ProbeCPUS = float64(cpuNs) / 1e9
	res.ProbeCPUFrac = res.ProbeCPUS / (mean(res.WithS) * float64(len(res.WithS)))
	if *asJSON {
		return e.PrintJSON(res)
	}
	fmt.Fprintf(e.Stdout, "replay without probes %.2f s, with %.2f s (means of %d): ratio %.3f; probes' own kernel time %.3f s = %.2f%% of the traced replays (source %s)\n",
		mean(res.WithoutS), mean(res.WithS), *pairs, res.Ratio, res.ProbeCPUS, 100*res.ProbeCPUFrac, res.Source)
	if res.Source != "ebpf" {
		return errors.New("the probes did not load (see the notices above): the ratio measures the Go-side fallback, not eBPF")
	}
	return nil
}

// tracedReplay replays tr on a fresh ctxd process with a small arena (so
// blocks go through the SSD tier), with ctxtrace attached when traced.
func tracedReplay(ctx context.Context, bin, model string, tr *trace.Trajectory, traced bool) (float64, ctxtrace.Report, error) {
	var rep ctxtrace.Report
	dir, err := os.MkdirTemp("", "ctxd-trace-bench-")
	if err != nil {
		return 0, rep, err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "ctxd.sock")
	cmd := exec.Command(bin, "--model", model, "--hot", "512", "--ctx", "512", "--threads", "1", "--arena-bytes", "8388608",
		"--socket", sock, "--data-dir", filepath.Join(dir, "data"), "--log-level", "error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, rep, fmt.Errorf("starting %s: %w", bin, err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	var c *client.Client
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err = client.Dial(ctx, sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return 0, rep, fmt.Errorf("ctxd did not come up: %w", err)
		}
	}
	defer c.Close()
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	if traced {
		started := make(chan struct{})
		go func() {
			var err error
			rep, err = ctxtrace.Run(tctx, ctxtrace.Options{Socket: sock, Notices: os.Stderr, Started: func() { close(started) }})
			done <- err
		}()
		select {
		case <-started:
		case err := <-done:
			return 0, rep, err
		}
	}
	start := time.Now()
	if _, err := replay.Run(ctx, c, tr, replay.Options{DecodeTokens: 4}); err != nil {
		return 0, rep, err
	}
	secs := time.Since(start).Seconds()
	if traced {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			return 0, rep, err
		}
	}
	return secs, rep, nil
}
