package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// UsageError marks a command line that cannot run as given (bad flag,
// missing argument): the command exits 2 instead of 1.
type UsageError struct{ Err error }

// Usage marks err as a usage error.
func Usage(err error) error { return UsageError{Err: err} }

func (u UsageError) Error() string { return u.Err.Error() }
func (u UsageError) Unwrap() error { return u.Err }

// IsUsage marks u as a usage error for ExitCode; a command's own error
// type can carry the same method.
func (UsageError) IsUsage() bool { return true }

// Parse parses args into fs, printing flag errors on stderr; a parse error
// or a stray argument is a UsageError, -h is flag.ErrHelp.
func Parse(fs *flag.FlagSet, stderr io.Writer, args []string) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return UsageError{err}
	}
	if fs.NArg() > 0 {
		return UsageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

// ExitCode prints err of command cmd of program prog on stderr and returns
// the exit status: 0 for nil or -h, 2 for a UsageError, 1 otherwise.
func ExitCode(stderr io.Writer, prog, cmd string, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "%s %s: %v\n", prog, cmd, err)
	var ue interface{ IsUsage() bool }
	if errors.As(err, &ue) && ue.IsUsage() {
		return 2
	}
	return 1
}
