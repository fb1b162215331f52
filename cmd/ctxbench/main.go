package main

import (
	"io"
	"os"

	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/internal/replay"
)

const progName = "ctxbench"

const usage = `ctxbench — benchmarks and evaluations of ctxd (ratios measured in one run)

usage: ctxbench [--socket PATH] [--no-progress] COMMAND [flags]

commands:
  bench replay|socket|resume|crash|trace|fair|speed|http|peer|engine  benchmarks
  eval recall                    needle recall beyond the trained window (needle.gguf)
  eval scale [--tokens 200000]   build a long session by streaming, time turns on it
  eval ppl [--tokens N] [--png F] perplexity vs position: dense, sliding, sinks+recent, ctxd
  eval reuse [--sessions opencode,qwen] [--traces F.traj]
                                 segment reuse past an early change vs exact prefill: KL, top-1, greedy, time, needle
  eval bound [--sessions opencode,qwen] [--perturb date,agents,memory,tools,gitstatus,subagent]
                                 per recorded request and perturbation: prefilled <= new + recompute budget
  gen-model --out FILE [--layers 24 --embd 896 --heads 14 --kv-heads 2 --ffn 4864]
                                 write a llama GGUF with random weights (benchmark shapes)

Benchmarks and evals take --model FILE and start a private daemon with it
(bench replay and bench http talk to --socket or --url when asked to;
bench peer --url URL compares ctxd with another OpenAI-compatible server).
Add --json for machine-readable output.
Long operations draw a progress bar on stderr when it is a terminal;
--no-progress or CTXD_NO_PROGRESS=1 turns it off.
Operator commands (status, explain, snapshot ...) are in ctxctl.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	return cli.Main(progName, usage, map[string]cli.Command{
		"bench":     cmdBench,
		"eval":      cmdEval,
		"gen-model": cmdGenModel,
	}, args, stdout, stderr)
}

func printSummary(e *cli.Env, rep *replay.Report) { cli.PrintReplaySummary(e.Stdout, rep) }
