//go:build !(linux && amd64)

package ctxtrace

import (
	"errors"
	"fmt"
	"runtime"
)

// ErrUnsupported: the probes are built for linux/amd64 only (the uprobes
// read amd64 registers).
var ErrUnsupported = errors.New("ctxtrace: eBPF probes need linux/amd64")

// Tracer is unavailable on this platform.
type Tracer struct{}

// Target names the process to trace.
type Target struct {
	PID        int
	Executable string
}

// Attach always fails here with ErrUnsupported.
func Attach(Target) (*Tracer, error) {
	return nil, fmt.Errorf("%w (this is %s/%s)", ErrUnsupported, runtime.GOOS, runtime.GOARCH)
}

func (tr *Tracer) Skipped() []string            { return nil }
func (tr *Tracer) SetArenaRanges([]Range) error { return ErrUnsupported }
func (tr *Tracer) Snapshot() ([]Hist, error)    { return nil, ErrUnsupported }
func (tr *Tracer) ProbeCPU() *ProbeCPU          { return nil }
func (tr *Tracer) Close() error                 { return nil }
