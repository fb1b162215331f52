package layout

import (
	"context"
	"slices"
	"sort"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/shm"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Orphan tapes as donors. An orphan tape whose segment spans were
// recorded with its blocks (orphanspans.go) lends its unchanged segments
// to a prompt past its first change as a live session does (donor.go): a
// sub-agent after its main session closed, a new session after ctxd
// restarted whose system prompt's date changed. Its tokens are its
// blocks' and its open tail's (tiers/orphantail.go); its Copy reads the
// blocks, and the tail, overlapping the ranges from the arena; the tape is only
// read (it stays an orphan, for the next prompt too). A block a range
// covers in part is trimmed as a live hot-set donor's is (hotdonor.go).

// OrphanDonors are the orphan tapes of t a prompt built under compat may
// copy segments from (policy.ChooseOrphanDonors: with spans, the same
// key, the most recent first, bounded), as donors; env is the receiving
// session's (its costs weigh a partial block's copy against its
// prefill). The caller holds the engine token.
func OrphanDonors(t *tiers.Tiers, compat string, env *Env) []Donor {
	orphans := t.Orphans()
	cands := make([]policy.OrphanDonorCandidate, len(orphans))
	for i, o := range orphans {
		cands[i] = policy.OrphanDonorCandidate{Spans: len(o.Spans), SameCompat: o.Compat == compat, Since: o.Since.UnixNano()}
	}
	var out []Donor
	for _, i := range policy.ChooseOrphanDonors(cands) {
		o := orphans[i]
		toks := o.AllTokens()
		out = append(out, Donor{ID: o.Session, Tokens: toks, Spans: tapeSpans(o.Spans), Exact: orphanExact(o), TailFrom: len(toks), Copy: orphanCopy(t, o, env)})
	}
	return out
}

// orphanExact is how many of an orphan tape's first tokens hold a cold
// prefill's KV at their tape positions (as a live hot set's DonorFacts):
// its blocks, then its tail, up to the first one parked from another
// position (an eviction had moved the stream) or past its approximate
// mark.
func orphanExact(o *tiers.OrphanTape) int {
	at := 0
	for _, m := range orphanPieces(o) {
		if int(m.Pos) != at {
			break
		}
		at += m.NTokens
	}
	if o.ApproxFrom >= 0 {
		at = min(at, o.ApproxFrom)
	}
	return at
}

// orphanCopy is an orphan tape's Donor.Copy: the blocks overlapping the
// ranges, read from the arena; a block a range covers only in part comes
// whole with the part marked (the recipient trims it, kvpart.go), or,
// when prefilling that part is cheaper (partWorthCopying), as a piece to
// prefill. A block that cannot be read (freed meanwhile for room,
// corrupt) is left out and prefilled; a cancelled context stops the copy.
func orphanCopy(t *tiers.Tiers, o *tiers.OrphanTape, env *Env) func(context.Context, []policy.SpanRange) ([]DonorPiece, bool, error) {
	blocks := orphanPieces(o)
	starts := make([]int, len(blocks)+1)
	for i, m := range blocks {
		starts[i+1] = starts[i] + m.NTokens
	}
	return func(ctx context.Context, ranges []policy.SpanRange) ([]DonorPiece, bool, error) {
		var out []DonorPiece
		for k, rg := range ranges {
			i := sort.Search(len(blocks), func(i int) bool { return starts[i+1] > rg.Start })
			for ; i < len(blocks) && starts[i] < rg.End; i++ {
				if err := ctx.Err(); err != nil {
					return nil, false, EngineErr(err)
				}
				m := blocks[i]
				if m.NTokens == 0 {
					continue
				}
				pc := blockPiece(env, k, rg, starts[i], m.NTokens)
				if pc.Prefill {
					out = append(out, pc)
					continue
				}
				kv, err := t.ReadParked(m.ID, nil)
				if err != nil {
					continue
				}
				pc.R = engine.Range{Pos0: int(m.Pos), Count: m.NTokens, Blob: kv}
				out = append(out, pc)
			}
		}
		return out, false, nil
	}
}

// orphanPieces are an orphan tape's blocks, then its tail as one more
// (read from the arena the same way: tiers/orphantail.go).
func orphanPieces(o *tiers.OrphanTape) []shm.Meta {
	if o.Tail == nil {
		return o.Blocks
	}
	return append(slices.Clip(o.Blocks), shm.Meta{ID: o.Tail.ID, Pos: o.Tail.Pos, NTokens: len(o.Tail.Tokens)})
}
