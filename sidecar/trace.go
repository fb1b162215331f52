package sidecar

import (
	"time"

	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Tracing markers. The tiers (package tiers) run every fetch's phases
// through their Observer, the metrics here (beginPhase/end). Bringing a parked block back into the engine (a fetch)
// runs in phases; each phase is bracketed by two calls of empty marker
// functions that eBPF uprobes attach to (tools/ctxtrace), and timed on the
// Go side as well (ctxd_fetch_phase_seconds{phase}), which is what
// ctxtrace shows when it may not load probes.
//
// Marker ABI, for uprobes (amd64, Go's register ABI, ABIInternal):
//
//	github.com/ctxd/ctxd/sidecar.fetchPhaseBegin(phase int, block uint64)
//	github.com/ctxd/ctxd/sidecar.fetchPhaseEnd(phase int, block uint64)
//
// phase arrives in RAX and block in RBX. Both functions are empty,
// //go:noinline leaf functions: no stack-check prologue, a lone RET, so a
// probe at the symbol's entry fires exactly once per call. Probe the
// entries only: a uretprobe rewrites the return address on the goroutine
// stack, which Go may move, and crashes the process. A phase of one block
// never overlaps itself (fetches run under the engine token), so
// (phase, block) pairs a begin with its end even when the goroutine moves
// to another thread in between.
//
// Phase numbers (ctxtrace's probes.go lists the same):
//
//	1 arena_lookup   reading the block's KV from the host-RAM arena (ReadKV)
//	2 decompress     decompressing a block read from the SSD tier
//	3 engine_insert  inserting the KV into the engine (InsertRange)

// fetchPhase numbers a phase of a block fetch (tiers.Phase); it is the
// marker's first argument.
type fetchPhase = tiers.Phase

// fetchPhaseBegin marks the start of a fetch phase for uprobes.
//
//go:noinline
func fetchPhaseBegin(phase fetchPhase, block uint64) {}

// fetchPhaseEnd marks the end of a fetch phase for uprobes.
//
//go:noinline
func fetchPhaseEnd(phase fetchPhase, block uint64) {}

// phaseTimer is one fetch phase in progress.
type phaseTimer struct {
	m     *metrics
	phase fetchPhase
	block uint64
	start time.Time
}

// beginPhase marks and starts timing a phase of fetching block.
func (m *metrics) beginPhase(p fetchPhase, block uint64) phaseTimer {
	fetchPhaseBegin(p, block)
	return phaseTimer{m: m, phase: p, block: block, start: time.Now()}
}

// end marks the end of the phase, records it and returns its duration.
func (t phaseTimer) end() time.Duration {
	d := time.Since(t.start)
	fetchPhaseEnd(t.phase, t.block)
	t.m.observePhase(t.phase, d)
	return d
}

// FetchPhase marks the start of phase p of fetching block (tiers.Observer).
func (m *metrics) FetchPhase(p tiers.Phase, block uint64) func() time.Duration {
	return m.beginPhase(p, block).end
}
