// Command ctxctl is the operator's CLI for ctxd.
//
//	ctxctl [--socket PATH] status|explain|generate|load|unload|replay|bench ...
//
// Run "ctxctl help" for the commands and their flags.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/sidecar"
)

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
  bench replay|socket|resume|crash|trace  benchmarks (ratios measured in one run)
  eval recall                    needle recall beyond the trained window (needle.gguf)
  eval scale [--tokens 200000]   build a long session by streaming, time turns on it
  eval ppl [--tokens N] [--png F] perplexity vs position: dense, sliding, sinks+recent, ctxd
  metrics [--json]               counters, gauges and timings (Prometheus text; see also ctxd --metrics-addr)
  snapshot save NAME [--session ID]      save a session to the SSD tier
  snapshot restore NAME [--generate N]   restore into a new session; print restore_ms and tokens
  snapshot ls | rm NAME | verify         list, delete, check every file
  gen-model --out FILE [--layers 24 --embd 896 --heads 14 --kv-heads 2 --ffn 4864]
                                 write a llama GGUF with random weights (benchmark shapes)

Commands that talk to a daemon use --socket (default $XDG_RUNTIME_DIR/ctxd/ctxd.sock).
replay and bench also take --model FILE: then ctxctl starts a private daemon
with that model and talks to it over its own socket.
Add --json to status, explain, replay and bench for machine-readable output.
Long operations draw a progress bar on stderr when it is a terminal;
--no-progress or CTXD_NO_PROGRESS=1 turns it off.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type env struct {
	socket string
	stdout io.Writer
	stderr io.Writer

	noProgress bool // --no-progress: no bars even on a terminal
}

func run(args []string, stdout, stderr io.Writer) int {
	global := flag.NewFlagSet("ctxctl", flag.ContinueOnError)
	global.SetOutput(stderr)
	e := &env{stdout: stdout, stderr: stderr}
	global.StringVar(&e.socket, "socket", sidecar.DefaultSocketPath(), "ctxd socket")
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
		"bench":    cmdBench,
		"eval":     cmdEval,
		"snapshot": cmdSnapshot,
	}
	cmds["gen-model"] = cmdGenModel
	cmds["metrics"] = cmdMetrics
	if rest[0] == "help" || rest[0] == "-h" || rest[0] == "--help" {
		fmt.Fprint(stdout, usage)
		return 0
	}
	f, ok := cmds[rest[0]]
	if !ok {
		fmt.Fprintf(stderr, "ctxctl: unknown command %q\n\n%s", rest[0], usage)
		return 2
	}
	if err := f(ctx, e, rest[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "ctxctl %s: %v\n", rest[0], err)
			return 2
		}
		fmt.Fprintf(stderr, "ctxctl %s: %v\n", rest[0], err)
		return 1
	}
	return 0
}

type usageError struct{ error }

func parse(fs *flag.FlagSet, e *env, args []string) error {
	fs.SetOutput(e.stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

func (e *env) dial(ctx context.Context) (*client.Client, error) {
	c, err := client.Dial(ctx, e.socket, client.Options{Name: "ctxctl"})
	if err != nil {
		return nil, fmt.Errorf("%w (is ctxd running? start it with: ctxd --model FILE)", err)
	}
	return c, nil
}

func (e *env) printJSON(v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// query parses args into fs, dials the daemon, runs call with the client
// and closes it: the shape of every read-only command.
func query[T any](ctx context.Context, e *env, fs *flag.FlagSet, args []string, call func(*client.Client) (T, error)) (T, error) {
	var zero T
	if err := parse(fs, e, args); err != nil {
		return zero, err
	}
	c, err := e.dial(ctx)
	if err != nil {
		return zero, err
	}
	defer c.Close()
	return call(c)
}
