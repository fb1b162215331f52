package main

import (
	"context"
	"flag"
	"io"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/internal/cli"
)

// env is what a command gets; the helpers below hand its fields to
// package cli, where the shared code lives.
type env struct {
	socket string
	stdout io.Writer
	stderr io.Writer

	noProgress bool // --no-progress: no bars even on a terminal
}

type progress = cli.Progress

// usageError marks a command line that cannot run as given: exit 2.
type usageError struct{ error }

func (usageError) IsUsage() bool { return true }

func (e *env) cli() *cli.Env {
	return &cli.Env{Socket: e.socket, Stdout: e.stdout, Stderr: e.stderr, NoProgress: e.noProgress}
}

func parse(fs *flag.FlagSet, e *env, args []string) error { return cli.Parse(fs, e.stderr, args) }

func (e *env) dial(ctx context.Context) (*client.Client, error) { return e.cli().Dial(ctx, progName) }

func (e *env) printJSON(v any) error { return e.cli().PrintJSON(v) }

func (e *env) newProgress(label string, total int64, unit string) *progress {
	return e.cli().NewProgress(label, total, unit)
}

func (e *env) callProgress(ctx context.Context, label string) (context.Context, func()) {
	return e.cli().CallProgress(ctx, label)
}

func tick[T any](p *progress, next func(T)) func(T) { return cli.Tick(p, next) }

// query parses args into fs, dials the daemon, runs call with the client
// and closes it: the shape of every read-only command.
func query[T any](ctx context.Context, e *env, fs *flag.FlagSet, args []string, call func(*client.Client) (T, error)) (T, error) {
	return cli.Query(ctx, e.cli(), progName, fs, args, call)
}
