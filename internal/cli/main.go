package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/ctxd/ctxd/protocol"
)

// Command is one subcommand of a program: it gets the program's Env and
// the arguments after its name.
type Command func(ctx context.Context, e *Env, args []string) error

// Main runs program name: it parses the global flags (--socket,
// --no-progress), then the subcommand named by the first argument, with a
// context cancelled by SIGINT or SIGTERM, and returns the exit status
// (ExitCode; 2 for a usage error or an unknown command).
func Main(name, usage string, cmds map[string]Command, args []string, stdout, stderr io.Writer) int {
	global := flag.NewFlagSet(name, flag.ContinueOnError)
	global.SetOutput(stderr)
	e := &Env{Name: name, Stdout: stdout, Stderr: stderr}
	global.StringVar(&e.Socket, "socket", protocol.DefaultSocketPath(), "ctxd socket")
	global.BoolVar(&e.NoProgress, "no-progress", false, "no progress bars on stderr")
	global.Usage = func() { fmt.Fprint(stderr, usage) }
	if err := global.Parse(args); err != nil {
		return 2
	}
	rest := global.Args()
	if len(rest) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if rest[0] == "help" || rest[0] == "-h" || rest[0] == "--help" {
		fmt.Fprint(stdout, usage)
		return 0
	}
	f, ok := cmds[rest[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n%s", name, rest[0], usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return ExitCode(stderr, name, rest[0], f(ctx, e, rest[1:]))
}
