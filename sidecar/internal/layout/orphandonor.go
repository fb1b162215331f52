package layout

import (
	"context"
	"sort"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Orphan tapes as donors. An orphan tape whose segment spans were
// recorded with its blocks (orphanspans.go) lends its unchanged segments
// to a prompt past its first change as a live session does (donor.go): a
// sub-agent after its main session closed, a new session after ctxd
// restarted whose system prompt's date changed. Its Copy reads the
// blocks lying wholly inside the ranges from the arena; the tape is only
// read (it stays an orphan, for the next prompt too). What a block does
// not cover at a range's ends is prefilled and counted recomputed.

// OrphanDonors are the orphan tapes of t a prompt built under compat may
// copy segments from (policy.ChooseOrphanDonors: with spans, the same
// key, the most recent first, bounded), as donors. The caller holds the
// engine token.
func OrphanDonors(t *tiers.Tiers, compat string) []Donor {
	orphans := t.Orphans()
	cands := make([]policy.OrphanDonorCandidate, len(orphans))
	for i, o := range orphans {
		cands[i] = policy.OrphanDonorCandidate{Spans: len(o.Spans), SameCompat: o.Compat == compat, Since: o.Since.UnixNano()}
	}
	var out []Donor
	for _, i := range policy.ChooseOrphanDonors(cands) {
		o := orphans[i]
		out = append(out, Donor{ID: o.Session, Tokens: o.Tokens, Spans: tapeSpans(o.Spans), Copy: orphanCopy(t, o)})
	}
	return out
}

// orphanCopy is an orphan tape's Donor.Copy: the blocks lying wholly
// inside the ranges, read from the arena. A block that cannot be read
// (freed meanwhile for room, corrupt) is left out and prefilled; a
// cancelled context stops the copy.
func orphanCopy(t *tiers.Tiers, o *tiers.OrphanTape) func(context.Context, []policy.SpanRange) ([]DonorPiece, bool, error) {
	starts := make([]int, len(o.Blocks)+1)
	for i, m := range o.Blocks {
		starts[i+1] = starts[i] + m.NTokens
	}
	return func(ctx context.Context, ranges []policy.SpanRange) ([]DonorPiece, bool, error) {
		var out []DonorPiece
		for k, rg := range ranges {
			for i := sort.SearchInts(starts[:len(o.Blocks)], rg.Start); i < len(o.Blocks) && starts[i+1] <= rg.End; i++ {
				if err := ctx.Err(); err != nil {
					return nil, false, EngineErr(err)
				}
				m := o.Blocks[i]
				kv, err := t.ReadParked(m.ID, nil)
				if err != nil || m.NTokens == 0 {
					continue
				}
				out = append(out, DonorPiece{Range: k, Src: starts[i], R: engine.Range{Pos0: int(m.Pos), Count: m.NTokens, Blob: kv}})
			}
		}
		return out, false, nil
	}
}
