package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"

	"github.com/ctxd/ctxd/internal/replay"
	"github.com/ctxd/ctxd/internal/trace"
)

func cmdReplay(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	tracePath := fs.String("trace", "", "SWE-agent .traj file")
	asJSON := fs.Bool("json", false, "print one JSON object with turns and summary")
	verifyCold := fs.Bool("verify-cold", false, "also run each turn cold in a fresh session and compare")
	decodeTokens := fs.Int("decode-tokens", 4, "greedy tokens per turn")
	model := fs.String("model", "", "start a private daemon with this model instead of using --socket")
	ctxTokens := fs.Int("ctx", 0, "context of the private daemon (0: derived)")
	saveSnap := fs.String("save-snapshot", "", "save the replayed session under this name and report its greedy continuation (final_tokens)")
	finalTokens := fs.Int("final-tokens", 16, "greedy tokens generated after --save-snapshot")
	if err := parse(fs, e, args); err != nil {
		return err
	}
	if *tracePath == "" {
		return usageError{fmt.Errorf("--trace is required")}
	}
	tr, err := trace.Load(*tracePath)
	if err != nil {
		return err
	}
	c, done, err := e.connect(ctx, *model, *ctxTokens)
	if err != nil {
		return err
	}
	defer done()
	o := replay.Options{DecodeTokens: *decodeTokens, VerifyCold: *verifyCold, SaveSnapshot: *saveSnap, FinalTokens: *finalTokens}
	if !*asJSON {
		header := fmt.Sprintf("%5s %14s %16s %14s %17s %11s", "turn", "prompt_tokens", "reusable_tokens", "reused_tokens", "prefilled_tokens", "latency_ms")
		if *verifyCold {
			header += fmt.Sprintf(" %10s %14s %15s", "cold_match", "max_logit_diff", "cold_latency_ms")
		}
		fmt.Fprintln(e.stdout, header)
		o.OnTurn = func(t replay.Turn) {
			line := fmt.Sprintf("%5d %14d %16d %14d %17d %11.1f", t.Turn, t.PromptTokens, t.ReusableTokens, t.ReusedTokens, t.PrefilledTokens, t.LatencyMS)
			if t.ColdMatch != nil {
				line += fmt.Sprintf(" %10v %14.3g %15.1f", *t.ColdMatch, *t.MaxLogitDiff, *t.ColdLatencyMS)
			}
			fmt.Fprintln(e.stdout, line)
		}
	}
	bar := e.newProgress(filepath.Base(*tracePath), int64(len(tr.Turns())), "turns")
	o.OnTurn = tick(bar, o.OnTurn)
	rep, err := replay.Run(ctx, c, tr, o)
	bar.Clear()
	if err != nil {
		return err
	}
	if *asJSON {
		return e.printJSON(rep)
	}
	printSummary(e, rep)
	return nil
}

func printSummary(e *env, rep *replay.Report) {
	s := rep.Summary
	fmt.Fprintf(e.stdout, "\n%s: %d turns, context %d tokens\n", rep.Trace, s.Turns, rep.ContextTokens)
	if s.Overflow != nil {
		fmt.Fprintf(e.stdout, "overflow_at_turn %d: prompt needs %d tokens, context holds %d (not truncated)\n", s.OverflowAtTurn, s.Overflow.PromptTokens, s.Overflow.ContextTokens)
	}
	fmt.Fprintf(e.stdout, "reuse_ratio %.4f  prompt_reuse %.4f  (turns 2..n)\n", s.ReuseRatio, s.PromptReuse)
	if s.WarmColdRatio != nil {
		fmt.Fprintf(e.stdout, "warm_cold_ratio %.3f (bound 3×(1−prompt_reuse) = %.3f)  cold_match_all %v  max_logit_diff %.3g\n",
			*s.WarmColdRatio, *s.WarmColdBound, *s.ColdMatchAll, *s.MaxLogitDiff)
	}
	if s.Snapshot != "" {
		fmt.Fprintf(e.stdout, "snapshot %s saved; final_tokens %v\n", s.Snapshot, s.FinalTokens)
	}
}
