package sidecar

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/sidecar/internal/layout"
)

// figures are the throughputs measured on this machine that decide
// between restoring a block and recomputing it.
type figures struct {
	prefillTokensPerSec float64
	decomp              *atomic.Uint64 // decompression bytes/s (float64 bits), measured in the background
	readBPS             float64        // running estimate from SSD reads
	measured            time.Time
	// cost models prefill time against the hot set's size (hot-set mode):
	// it bounds the hot budget by the turn-latency target on a CPU.
	cost    policy.PrefillCost
	hasCost bool
}

// measureFigures times a prefill of one batch and the compression of its
// KV, then clears the context. With costAt > 0 it also times a batch at
// that context to fit the prefill cost model. The caller holds the slot
// token.
func measureFigures(ctx context.Context, ectx engine.Context, facts engine.Facts, eb int, costAt int) figures {
	f := figures{readBPS: 1e9, measured: time.Now(), decomp: new(atomic.Uint64)}
	f.decomp.Store(math.Float64bits(1e9)) // until measured
	n := min(64, ectx.Options().BatchTokens, max(facts.TrainedContext/4, 8), ectx.Options().ContextTokens)
	if costAt+n > ectx.Options().ContextTokens {
		costAt = 0
	}
	toks := make([]engine.Token, n)
	for i := range toks {
		toks[i] = engine.Token(3 + i%max(facts.VocabSize-3, 1))
	}
	ectx.Clear()
	defer ectx.Clear()
	start := time.Now()
	if err := ectx.Decode(ctx, toks, 0); err != nil {
		return f
	}
	f.prefillTokensPerSec = float64(n) / time.Since(start).Seconds()
	if costAt > n+n {
		// A second point, n tokens attending to costAt tokens, fits the
		// attention part of prefill cost.
		fill := make([]engine.Token, costAt-n)
		for i := range fill {
			fill[i] = toks[i%n]
		}
		if err := ectx.Decode(ctx, fill, n); err == nil {
			t0 := time.Now()
			if err := ectx.Decode(ctx, toks, costAt); err == nil {
				tpsB := float64(n) / time.Since(t0).Seconds()
				if c, err := policy.FitPrefillCost(n/2, f.prefillTokensPerSec, costAt+n/2, tpsB); err == nil {
					f.cost, f.hasCost = c, true
				}
			}
		}
	}
	r, err := ectx.ExtractRange(0, n)
	if err != nil {
		return f
	}
	// The sample is one batch's KV as it is (repeating it would let zstd
	// match whole copies and overstate the throughput).
	sample := r.Blob
	// Timing compression takes a few hundred milliseconds of CPU: do it
	// off the load path; restores use the default until it lands.
	go func(out *atomic.Uint64) {
		if tp, err := coldstore.MeasureThroughput(ctx, eb, sample); err == nil && tp.DecompressBytesPerSec > 0 {
			out.Store(math.Float64bits(tp.DecompressBytesPerSec))
		}
	}(f.decomp)
	return f
}

// decompressBPS is the measured decompression throughput (1 GB/s until
// the measurement lands).
func (f figures) decompressBPS() float64 {
	if f.decomp == nil {
		return 1e9
	}
	return math.Float64frombits(f.decomp.Load())
}

// latencyBound lowers the hot budget so a turn of suffix tokens stays
// within latency by the measured cost model (attention grows with the hot
// set). It never goes below the smallest budget hc can work with.
func latencyBound(hc layout.HotConfig, f figures, latency time.Duration, suffix int) (layout.HotConfig, string) {
	if hc.Budget == 0 || !f.hasCost || latency <= 0 || suffix <= 0 {
		return hc, ""
	}
	h, err := policy.LatencyHotBudget(f.cost, latency.Seconds(), min(suffix, hc.Limit), hc.Limit)
	switch {
	case err != nil:
		return hc, "turn-latency bound not applied: " + err.Error()
	case h >= hc.Limit:
		return hc, ""
	}
	l := hc.Limits().Lowered(h) // never below policy's MinBudget
	msg := fmt.Sprintf("hot budget lowered from %d to %d tokens so a %d-token turn stays within %s on this machine (%.3g ms/token + %.3g µs per context token)",
		hc.Limit, l.Limit, suffix, latency, 1e3*f.cost.BaseSeconds, 1e6*f.cost.PerContextSeconds)
	return hc.WithLimits(l), msg
}
