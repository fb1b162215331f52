package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"

	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/internal/replay"
	"github.com/ctxd/ctxd/internal/trace"
)

func cmdReplay(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	tracePath := fs.String("trace", "", "SWE-agent .traj file")
	asJSON := fs.Bool("json", false, "print one JSON object with turns and summary")
	verifyCold := fs.Bool("verify-cold", false, "also run each turn cold in a fresh session and compare")
	decodeTokens := fs.Int("decode-tokens", 4, "greedy tokens per turn")
	saveSnap := fs.String("save-snapshot", "", "save the replayed session under this name and report its greedy continuation (final_tokens)")
	finalTokens := fs.Int("final-tokens", 16, "greedy tokens generated after --save-snapshot")
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	if *tracePath == "" {
		return cli.Usage(fmt.Errorf("--trace is required"))
	}
	tr, err := trace.Load(*tracePath)
	if err != nil {
		return err
	}
	c, err := e.Dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	o := replay.Options{DecodeTokens: *decodeTokens, VerifyCold: *verifyCold, SaveSnapshot: *saveSnap, FinalTokens: *finalTokens}
	if !*asJSON {
		header := fmt.Sprintf("%5s %14s %16s %14s %17s %11s", "turn", "prompt_tokens", "reusable_tokens", "reused_tokens", "prefilled_tokens", "latency_ms")
		if *verifyCold {
			header += fmt.Sprintf(" %10s %14s %15s", "cold_match", "max_logit_diff", "cold_latency_ms")
		}
		fmt.Fprintln(e.Stdout, header)
		o.OnTurn = func(t replay.Turn) {
			line := fmt.Sprintf("%5d %14d %16d %14d %17d %11.1f", t.Turn, t.PromptTokens, t.ReusableTokens, t.ReusedTokens, t.PrefilledTokens, t.LatencyMS)
			if t.ColdMatch != nil {
				line += fmt.Sprintf(" %10v %14.3g %15.1f", *t.ColdMatch, *t.MaxLogitDiff, *t.ColdLatencyMS)
			}
			fmt.Fprintln(e.Stdout, line)
		}
	}
	bar := e.NewProgress(filepath.Base(*tracePath), int64(len(tr.Turns())), "turns")
	o.OnTurn = cli.Tick(bar, o.OnTurn)
	rep, err := replay.Run(ctx, c, tr, o)
	bar.Clear()
	if err != nil {
		return err
	}
	if *asJSON {
		return e.PrintJSON(rep)
	}
	cli.PrintReplaySummary(e.Stdout, rep)
	return nil
}
