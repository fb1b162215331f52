package main

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"time"

	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/sidecar"
)

// besideBusy runs speedOn alone and then beside one busy process (a
// shell's endless loop, at this process's priority, on no particular
// core), reps times, and prints each round's times and the ratios
// busy/alone, so the "a turn beside one busy core ≤ 2× its idle time"
// goal of issue 17 is one command. A round's two runs are back to back,
// so slow drift in the machine's other load cancels in the ratio.
func besideBusy(ctx context.Context, e *cli.Env, cfg sidecar.Config, toks, warm []int32, gen, reps int) error {
	type round struct{ alone, busy speedResult }
	var rounds []round
	for r := range reps {
		alone, err := speedOn(ctx, cfg, toks, warm, gen)
		if err != nil {
			return err
		}
		stop, err := startBusyLoop()
		if err != nil {
			return err
		}
		time.Sleep(500 * time.Millisecond) // the loop shows in the load
		busy, err := speedOn(ctx, cfg, toks, warm, gen)
		stop()
		if err != nil {
			return err
		}
		rounds = append(rounds, round{alone, busy})
		fmt.Fprintf(e.Stdout, "round %d: alone %d threads: prefill %.1f tok/s, decode %.1f tok/s, warm turn %.2f s; beside a busy process %d threads: %.1f tok/s, %.1f tok/s, %.2f s; busy/alone: prefill time %.2fx, decode time %.2fx, warm turn %.2fx\n",
			r+1, alone.Threads, alone.PrefillTokS, alone.DecodeTokS, alone.WarmS, busy.Threads, busy.PrefillTokS, busy.DecodeTokS, busy.WarmS,
			alone.PrefillTokS/busy.PrefillTokS, alone.DecodeTokS/busy.DecodeTokS, ratioOr(busy.WarmS, alone.WarmS))
	}
	med := func(f func(round) float64) float64 {
		v := make([]float64, len(rounds))
		for i, r := range rounds {
			v[i] = f(r)
		}
		sort.Float64s(v)
		if len(v)%2 == 0 {
			return (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		return v[len(v)/2]
	}
	fmt.Fprintf(e.Stdout, "median of %d rounds, busy/alone: prefill time %.2fx, decode time %.2fx, warm turn %.2fx (goal: warm turn <= 2x)\n", len(rounds),
		med(func(r round) float64 { return r.alone.PrefillTokS / r.busy.PrefillTokS }),
		med(func(r round) float64 { return r.alone.DecodeTokS / r.busy.DecodeTokS }),
		med(func(r round) float64 { return ratioOr(r.busy.WarmS, r.alone.WarmS) }))
	return nil
}

func ratioOr(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// startBusyLoop starts one process that keeps one core busy until stop.
func startBusyLoop() (stop func(), err error) {
	cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting a busy loop: %w", err)
	}
	return func() {
		cmd.Process.Kill()
		cmd.Wait()
	}, nil
}
