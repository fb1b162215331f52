package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/internal/replay"
	"github.com/ctxd/ctxd/protocol"
)

const progName = "ctxbench"

const usage = `ctxbench — benchmarks and evaluations of ctxd (ratios measured in one run)

usage: ctxbench [--socket PATH] [--no-progress] COMMAND [flags]

commands:
  bench replay|socket|resume|crash|trace|fair|speed|http  benchmarks
  eval recall                    needle recall beyond the trained window (needle.gguf)
  eval scale [--tokens 200000]   build a long session by streaming, time turns on it
  eval ppl [--tokens N] [--png F] perplexity vs position: dense, sliding, sinks+recent, ctxd
  gen-model --out FILE [--layers 24 --embd 896 --heads 14 --kv-heads 2 --ffn 4864]
                                 write a llama GGUF with random weights (benchmark shapes)

Benchmarks and evals take --model FILE and start a private daemon with it
(bench replay and bench http talk to --socket or --url when asked to).
Add --json for machine-readable output.
Long operations draw a progress bar on stderr when it is a terminal;
--no-progress or CTXD_NO_PROGRESS=1 turns it off.
Operator commands (status, explain, snapshot ...) are in ctxctl.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	global := flag.NewFlagSet(progName, flag.ContinueOnError)
	global.SetOutput(stderr)
	e := &env{stdout: stdout, stderr: stderr}
	global.StringVar(&e.socket, "socket", protocol.DefaultSocketPath(), "ctxd socket")
	global.BoolVar(&e.noProgress, "no-progress", false, "no progress bars on stderr")
	global.Usage = func() { fmt.Fprint(stderr, usage) }
	if err := global.Parse(args); err != nil {
		return 2
	}
	rest := global.Args()
	if len(rest) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmds := map[string]func(context.Context, *env, []string) error{
		"bench":     cmdBench,
		"eval":      cmdEval,
		"gen-model": cmdGenModel,
	}
	if rest[0] == "help" || rest[0] == "-h" || rest[0] == "--help" {
		fmt.Fprint(stdout, usage)
		return 0
	}
	f, ok := cmds[rest[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n%s", progName, rest[0], usage)
		return 2
	}
	return cli.ExitCode(stderr, progName, rest[0], f(ctx, e, rest[1:]))
}

func printSummary(e *env, rep *replay.Report) { cli.PrintReplaySummary(e.stdout, rep) }
