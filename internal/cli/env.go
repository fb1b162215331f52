package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/ctxd/ctxd/client"
)

// Env is what every command gets: the program's name, the daemon's
// socket, where to print, and whether progress bars are off
// (--no-progress).
type Env struct {
	Name       string // the program, as it introduces itself to the daemon
	Socket     string
	Stdout     io.Writer
	Stderr     io.Writer
	NoProgress bool
}

// Dial connects to the daemon at e.Socket as e.Name; the error says how
// to start one.
func (e *Env) Dial(ctx context.Context) (*client.Client, error) {
	c, err := client.Dial(ctx, e.Socket, client.Options{Name: e.Name})
	if err != nil {
		return nil, fmt.Errorf("%w (is ctxd running? start it with: ctxd --model FILE)", err)
	}
	return c, nil
}

// PrintJSON writes v to e.Stdout as indented JSON.
func (e *Env) PrintJSON(v any) error {
	enc := json.NewEncoder(e.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Query parses args into fs, dials the daemon, runs call with the client
// and closes it: the shape of every read-only command.
func Query[T any](ctx context.Context, e *Env, fs *flag.FlagSet, args []string, call func(*client.Client) (T, error)) (T, error) {
	var zero T
	if err := Parse(fs, e.Stderr, args); err != nil {
		return zero, err
	}
	c, err := e.Dial(ctx)
	if err != nil {
		return zero, err
	}
	defer c.Close()
	return call(c)
}
