// Command ctxtrace shows where ctxd spends its time: log2 latency
// histograms of its I/O system calls, block requests, page faults in its
// host-RAM arena and the phases of its block fetches, from eBPF probes
// (package tools/ctxtrace). Without the privileges the probes need it says
// exactly which are missing and shows ctxd's own Go-side timings instead.
//
//	ctxtrace --pid PID | --socket PATH [--duration D] [--json] [--png FILE] [--go-side]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ctxd/ctxd/tools/ctxtrace"
)

const usage = `ctxtrace — latency histograms of a running ctxd

usage: ctxtrace (--pid PID | --socket PATH) [--duration D] [--json] [--png FILE] [--go-side]

  --pid PID        trace this ctxd process (arena ranges from /proc/PID/maps)
  --socket PATH    ctxd's socket: its pid, arena ranges and Go-side timings
                   (default, when neither is given: ctxd's default socket)
  --duration D     how long to trace, e.g. 10s (default: until Ctrl-C)
  --json           print JSON: {"probes": [{"name", "count", "p50_us", "p99_us", "buckets"}, ...]}
  --png FILE       also plot the histograms to FILE
  --go-side        skip eBPF: report ctxd's Go-side timings only

eBPF needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN, e.g. root) and tracefs
mounted for the block and page-fault tracepoints; without them ctxtrace says
what is missing and falls back to the Go-side timings (needs --socket).
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ctxtrace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	var (
		o       ctxtrace.Options
		asJSON  bool
		pngPath string
	)
	fs.IntVar(&o.PID, "pid", 0, "ctxd's process id")
	fs.StringVar(&o.Socket, "socket", "", "ctxd's socket")
	fs.DurationVar(&o.Duration, "duration", 0, "how long to trace (0: until interrupted)")
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	fs.StringVar(&pngPath, "png", "", "plot the histograms to this PNG file")
	fs.BoolVar(&o.GoSideOnly, "go-side", false, "skip eBPF: ctxd's Go-side timings only")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ctxtrace: unexpected argument %q\n\n%s", fs.Arg(0), usage)
		return 2
	}
	if o.PID < 0 || o.Duration < 0 {
		fmt.Fprintf(stderr, "ctxtrace: --pid and --duration must not be negative\n")
		return 2
	}
	if o.PID == 0 && o.Socket == "" {
		o.Socket = ctxtrace.DefaultSocketPath()
	}
	o.Notices = stderr
	if o.Duration == 0 {
		fmt.Fprintln(stderr, "ctxtrace: tracing; Ctrl-C to stop and print")
	}
	start := time.Now()
	r, err := ctxtrace.Run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "ctxtrace: %v\n", err)
		return 1
	}
	if asJSON {
		err = r.WriteJSON(stdout)
	} else {
		err = r.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ctxtrace: %v\n", err)
		return 1
	}
	if pngPath != "" {
		if err := r.WritePNG(pngPath); err != nil {
			fmt.Fprintf(stderr, "ctxtrace: --png: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "ctxtrace: plot written to %s (%.1f s traced)\n", pngPath, time.Since(start).Seconds())
	}
	return 0
}
