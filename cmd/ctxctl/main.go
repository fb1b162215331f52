// Command ctxctl is the operator's CLI for ctxd: every command talks to a
// running daemon over its socket through package client. It links no cgo
// and no eBPF (TestNoCgoDependencies holds it to that); benchmarks and
// evaluations, which start private daemons, are in cmd/ctxbench.
//
//	ctxctl [--socket PATH] status|explain|generate|load|unload|replay|snapshot|metrics ...
//
// Run "ctxctl help" for the commands and their flags.
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
	"github.com/ctxd/ctxd/protocol"
)

const progName = "ctxctl"

const usage = `ctxctl — operate a ctxd daemon

usage: ctxctl [--socket PATH] [--no-progress] COMMAND [flags]

commands:
  status                         daemon, model and capacity
  explain [--session ID] [--png F]
                                 what a session holds (default: the last used); --png F draws it
  generate --prompt TEXT         open a session, prefill TEXT, stream a continuation
  load --model FILE [--ctx N]    load or switch the model (fails while sessions are open)
  unload                         unload the model
  replay --trace FILE.traj       replay a SWE-agent trajectory turn by turn
  metrics [--json]               counters, gauges and timings (Prometheus text; see also ctxd --metrics-addr)
  snapshot save NAME [--session ID]      save a session to the SSD tier
  snapshot restore NAME [--generate N]   restore into a new session; print restore_ms and tokens
  snapshot ls | rm NAME | verify         list, delete, check every file

Every command talks to a running ctxd over --socket (default $XDG_RUNTIME_DIR/ctxd/ctxd.sock).
Benchmarks, evaluations and gen-model are in ctxbench.
Add --json to status, explain and replay for machine-readable output.
Long operations draw a progress bar on stderr when it is a terminal;
--no-progress or CTXD_NO_PROGRESS=1 turns it off.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	global := flag.NewFlagSet("ctxctl", flag.ContinueOnError)
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
		"status":   cmdStatus,
		"explain":  cmdExplain,
		"generate": cmdGenerate,
		"load":     cmdLoad,
		"unload":   cmdUnload,
		"replay":   cmdReplay,
		"snapshot": cmdSnapshot,
		"metrics":  cmdMetrics,
	}
	if rest[0] == "help" || rest[0] == "-h" || rest[0] == "--help" {
		fmt.Fprint(stdout, usage)
		return 0
	}
	f, ok := cmds[rest[0]]
	if !ok {
		fmt.Fprintf(stderr, "ctxctl: unknown command %q\n\n%s", rest[0], usage)
		return 2
	}
	return cli.ExitCode(stderr, progName, rest[0], f(ctx, e, rest[1:]))
}
