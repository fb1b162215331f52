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
	"io"
	"os"

	"github.com/ctxd/ctxd/internal/cli"
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
	return cli.Main(progName, usage, map[string]cli.Command{
		"status":   cmdStatus,
		"explain":  cmdExplain,
		"generate": cmdGenerate,
		"load":     cmdLoad,
		"unload":   cmdUnload,
		"replay":   cmdReplay,
		"snapshot": cmdSnapshot,
		"metrics":  cmdMetrics,
	}, args, stdout, stderr)
}
