package layout

import (
	"context"
	"fmt"
	"math"
	"sort"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// A hot set as a donor (donor.go): its sealed blocks are read from their
// copies in the tiers, token by token (a block only partly inside a range
// is the part inside, trimmed by the recipient), what only its engine
// state holds (its open tail) through the daemon's EngineCopy, and its
// blocks decoded at their own positions are an exact prefix (DonorFacts).

// CopySealed is a hot set's Donor.Copy: the sealed blocks the ranges
// cover, read from their copies in the arena or the SSD tier (read-only:
// the donor's blocks, residency and engine are left as they are). A block
// only partly inside a range is the part inside (a whole block to trim),
// or, when prefilling that part is cheaper (policy), a piece to prefill.
// A block without a copy, or whose copy cannot be read, is left out (the
// recipient prefills it); a cancelled read stops the copy.
func (h *hotSet) CopySealed(ctx context.Context, ranges []policy.SpanRange) ([]DonorPiece, bool, error) {
	var out []DonorPiece
	for k, rg := range ranges {
		i := sort.Search(len(h.blocks), func(i int) bool { return h.blocks[i].vstart+h.blocks[i].n > rg.Start })
		for ; i < len(h.blocks) && h.blocks[i].vstart < rg.End; i++ {
			b := h.blocks[i]
			where := b.res.copyTier()
			if b.n == 0 || where == tiers.None {
				continue
			}
			pc := blockPiece(h.env, k, rg, b.vstart, b.n)
			if pc.Prefill {
				out = append(out, pc)
				continue
			}
			kv, err := h.env.Tiers.Fetch(ctx, where, b.id, b.ssdKey, nil)
			if err != nil {
				if ctx.Err() != nil {
					return nil, false, EngineErr(ctx.Err())
				}
				continue
			}
			pc.R = engine.Range{Pos0: b.pos0, Count: b.n, Blob: kv}
			out = append(out, pc)
		}
	}
	return out, false, nil
}

// blockPiece is what range k (rg) asks of a block of n tokens at tape
// index start: the whole block, or its part inside rg (Lo, N: a whole
// block the recipient trims), or, when prefilling that part is cheaper
// (partWorthCopying), that part as a piece to prefill (Prefill). The
// caller reads the block unless Prefill is set.
func blockPiece(env *Env, k int, rg policy.SpanRange, start, n int) DonorPiece {
	lo, hi := max(rg.Start, start)-start, min(rg.End, start+n)-start
	pc := DonorPiece{Range: k, Src: start + lo}
	if hi-lo < n {
		pc.Lo, pc.N = lo, hi-lo
		pc.Prefill = !partWorthCopying(env, hi-lo, n)
	}
	return pc
}

// copyFor is a hot set's Donor.Copy: its sealed blocks from the tiers
// (CopySealed), and what the ranges hold beyond them that only its engine
// state holds (its open tail, a block without a copy) through ec.
func (h *hotSet) copyFor(ctx context.Context, ranges []policy.SpanRange, ec EngineCopy) ([]DonorPiece, bool, error) {
	out, _, err := h.CopySealed(ctx, ranges)
	if err != nil || ec == nil {
		return out, false, err
	}
	covered := make([][]policy.SpanRange, len(ranges))
	for _, pc := range out {
		covered[pc.Range] = append(covered[pc.Range], policy.SpanRange{Start: pc.Src, End: pc.Src + pc.count()})
	}
	type want struct{ k, v int }
	var wants []want
	var pos []policy.SpanRange
	for k, rg := range ranges {
		for v := rg.Start; v < rg.End; {
			if c := coveredAt(covered[k], v); c > v {
				v = c
				continue
			}
			p, n, ok := h.enginePos(v)
			n = min(n, rg.End-v, nextCovered(covered[k], v)-v)
			if ok {
				wants, pos = append(wants, want{k, v}), append(pos, policy.SpanRange{Start: p, End: p + n})
			}
			v += n
		}
	}
	if len(pos) == 0 {
		return out, false, nil
	}
	rs, lost, err := ec(ctx, pos)
	if lost {
		// The receiving session's KV is gone: nothing of this copy counts.
		if err == nil {
			err = fmt.Errorf("%w: the session's KV was lost", protocol.ErrInternal)
		}
		return nil, true, err
	}
	if err != nil || len(rs) != len(pos) {
		// The sealed blocks still count; the rest is prefilled (the
		// donor is only read: nothing is noted on it).
		return out, false, nil
	}
	for i, r := range rs {
		out = append(out, DonorPiece{Range: wants[i].k, Src: wants[i].v, R: r})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Src < out[j].Src })
	return out, false, nil
}

// coveredAt is the end of the range of cs holding v, or v.
func coveredAt(cs []policy.SpanRange, v int) int {
	for _, c := range cs {
		if c.Start <= v && v < c.End {
			return c.End
		}
	}
	return v
}

// nextCovered is the start of the first range of cs past v, or a large
// number.
func nextCovered(cs []policy.SpanRange, v int) int {
	next := math.MaxInt
	for _, c := range cs {
		if c.Start > v {
			next = min(next, c.Start)
		}
	}
	return next
}

func (h *hotSet) DonorCopy(ec EngineCopy) func(context.Context, []policy.SpanRange) ([]DonorPiece, bool, error) {
	return func(ctx context.Context, ranges []policy.SpanRange) ([]DonorPiece, bool, error) {
		return h.copyFor(ctx, ranges, ec)
	}
}

// DonorFacts: a hot set's KV is exact at its tape positions up to the
// first block not decoded there (an eviction moved the stream down
// before it) or without a copy to read; its open tail only the engine
// state holds.
func (h *hotSet) DonorFacts() (exact, tailFrom int) {
	for _, b := range h.blocks {
		if b.pos0 != b.vstart || b.res.copyTier() == tiers.None {
			return h.tape.ExactTokens(b.vstart), h.tailV
		}
	}
	if h.tailP == h.tailV {
		return h.tape.ExactTokens(len(h.tape.tokens)), h.tailV
	}
	return h.tape.ExactTokens(h.tailV), h.tailV
}
