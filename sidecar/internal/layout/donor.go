package layout

import (
	"context"
	"fmt"
	"sort"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
)

// Reuse from other live sessions (donors). A sub-agent opens a session of
// its own with its own system prompt, yet sends the tools array the main
// conversation holds; a new conversation starts as a running one did.
// When a prompt's segments past its first change are not on the session's
// own tape, the daemon offers the other live sessions of the same model
// and template as donors (Prompt.Donors); policy.MatchDonorSegments finds
// their equal segments, policy.PlanSegmentReuse decides with the same
// recompute budget as for the session's own segments, and the donor's KV
// is copied (never moved: a donor keeps everything it holds) and put at
// the new positions like a moved run: approximate. A dense donor's prefix
// equal to the prompt's (policy.DonorPrefix) is copied at the same
// positions: exact reuse.
//
// A layout never writes a donor: it reads its tokens and asks its Copy for
// bytes. Copy is the daemon's (the slot owns what is resident and what is
// parked) or the donor's hot set's (copies of its sealed blocks in the
// tiers, read-only).

// Donor is another live session whose KV a prompt may copy.
type Donor struct {
	ID     uint64 // the donor session, for explain
	Tokens []engine.Token
	Spans  []Span
	// Exact: the donor's first Exact tokens hold a cold prefill's KV at
	// their tape positions (a dense tape; a hot set's blocks decoded
	// before any eviction moved its stream), so a prefix copied to the
	// same positions is exact (DonorFacts).
	Exact int
	// TailFrom: the donor's KV from this tape index on is only in its
	// engine state (a hot set's open tail; 0 for a dense donor: all of
	// it), which the daemon copies by loading that state; below it a hot
	// set's sealed blocks are read from the tiers, each weighed on its
	// own (policy.PartialBlockWorthCopying).
	TailFrom int
	// CopySeconds estimates what copying from the donor's engine state
	// costs (0: unknown, or next to nothing): tokens at or past TailFrom
	// that would prefill faster are not copied (policy.DonorWorthCopying).
	CopySeconds float64
	// Copy copies the KV of the donor's tape ranges out as pieces, in
	// order; a piece may cover part of a range only (the rest is
	// prefilled). The donor is left as it was, and so are the calling
	// session's tape and KV, except that the engine may lose the last
	// logits; when the calling session's KV could not be put back it is
	// empty and lost is true.
	Copy func(ctx context.Context, ranges []policy.SpanRange) (pieces []DonorPiece, lost bool, err error)
}

// EngineCopy copies ranges of positions out of a parked session's engine
// state (the daemon's: the slot owns resident and parked KV), one range
// each, leaving that session as it was; lost as in Donor.Copy.
type EngineCopy func(ctx context.Context, positions []policy.SpanRange) (ranges []engine.Range, lost bool, err error)

// DonorPiece is a copied piece of a donor's KV: Range is the index of the
// range asked for that it lies in, Src its first index in the donor's tape.
// N > 0: R is a whole block of which only the tokens [Lo, Lo+N) are the
// piece (the recipient trims it). Prefill: N tokens from Src the donor
// chose not to copy (a block read back for a few of its tokens costs more
// than prefilling them, policy.PartialBlockWorthCopying): R is empty, the
// recipient prefills them within its budget.
type DonorPiece struct {
	Range, Src int
	R          engine.Range
	Lo, N      int
	Prefill    bool
}

// count is how many of the donor's tokens the piece stands for.
func (pc DonorPiece) count() int {
	if pc.N > 0 || pc.Prefill {
		return pc.N
	}
	return pc.R.Count
}

// heldTapes are the donors as policy sees them.
func heldTapes(donors []Donor) []policy.HeldTape {
	out := make([]policy.HeldTape, len(donors))
	for i, d := range donors {
		out[i] = policy.HeldTape{Tokens: d.Tokens, Spans: spanRanges(d.Spans), Exact: d.Exact}
	}
	return out
}

// commonOnly are held tapes whose whole common prefix with a prompt
// counts, exact or not (policy.DonorPrefix then finds the longest).
func commonOnly(held []policy.HeldTape) []policy.HeldTape {
	out := make([]policy.HeldTape, len(held))
	for i, h := range held {
		h.Exact = len(h.Tokens)
		out[i] = h
	}
	return out
}

// donorCopy is what copyFromDonors brought: the exact prefix's pieces and
// the donor runs' pieces at their destinations (tape indices of the new
// prompt), in order, and how many tokens the donors chose not to copy
// (prefilled, within the budget).
type donorCopy struct {
	prefix   []kvPiece
	runs     []kvPiece
	declined int
}

// copyFromDonors copies the donor runs of runs (Donor > 0) and the exact
// prefix [kept, prefixEnd) of donor prefixDonor (-1: none) out of their
// donors, one Copy per donor. lost: the session's KV is gone (Copy could
// not put it back).
func copyFromDonors(ctx context.Context, donors []Donor, runs []policy.ReuseRun, prefixDonor, kept, prefixEnd int) (donorCopy, bool, error) {
	var out donorCopy
	for k := range donors {
		var ranges []policy.SpanRange
		var dsts []int // per range: where its first token goes
		if prefixDonor == k && prefixEnd > kept {
			ranges, dsts = append(ranges, policy.SpanRange{Start: kept, End: prefixEnd}), append(dsts, -1)
		}
		for _, r := range runs {
			if r.Donor == k+1 {
				ranges, dsts = append(ranges, policy.SpanRange{Start: r.Src, End: r.Src + r.Len}), append(dsts, r.Dst)
			}
		}
		if len(ranges) == 0 {
			continue
		}
		pieces, lost, err := donors[k].Copy(ctx, ranges)
		if err != nil {
			return donorCopy{}, lost, fmt.Errorf("copying KV from session %d: %w", donors[k].ID, err)
		}
		for _, pc := range pieces {
			i, n := pc.Range, pc.count()
			if i < 0 || i >= len(ranges) || pc.Src < ranges[i].Start || pc.Src+n > ranges[i].End || n <= 0 ||
				(!pc.Prefill && (pc.R.Count <= 0 || pc.Lo < 0 || pc.Lo+n > pc.R.Count)) {
				return donorCopy{}, false, fmt.Errorf("%w: session %d gave a piece [%d,+%d) outside what was asked", protocol.ErrInternal, donors[k].ID, pc.Src, n)
			}
			if pc.Prefill {
				out.declined += n
				continue
			}
			kp := kvPiece{dst: pc.Src, r: pc.R}
			if pc.N > 0 {
				kp.lo, kp.n = pc.Lo, pc.N
			}
			if dsts[i] >= 0 {
				kp.dst = dsts[i] + pc.Src - ranges[i].Start
				out.runs = append(out.runs, kp)
			} else {
				out.prefix = append(out.prefix, kp)
			}
		}
	}
	sort.Slice(out.prefix, func(i, j int) bool { return out.prefix[i].dst < out.prefix[j].dst })
	sort.Slice(out.runs, func(i, j int) bool { return out.runs[i].dst < out.runs[j].dst })
	return out, false, nil
}

// donorNote is what explain says about the donors a sync used.
func donorNote(donors []Donor, runs []policy.ReuseRun, prefixDonor, kept, prefixEnd int) string {
	var s string
	if prefixDonor >= 0 && prefixEnd > kept {
		s = fmt.Sprintf("; %d tokens copied exactly from session %d", prefixEnd-kept, donors[prefixDonor].ID)
	}
	per := map[int]int{}
	for _, r := range runs {
		if r.Donor > 0 {
			per[r.Donor] += r.Len
		}
	}
	for k := range donors {
		if n := per[k+1]; n > 0 {
			s += fmt.Sprintf("; %d tokens of segments copied from session %d", n, donors[k].ID)
		}
	}
	return s
}

// worthCopying drops the parts of the donors' runs that lie at or past
// their TailFrom (what only their engine state holds) when those tokens
// would prefill faster than the copy takes (prefix: the tokens [kept,
// from) taken from prefixDonor's exact prefix) and returns how many tokens
// it dropped.
func worthCopying(donors []Donor, runs []policy.ReuseRun, perToken float64, prefixDonor, kept, from int) ([]policy.ReuseRun, int) {
	saved := make([]int, len(donors))
	for _, r := range runs {
		if r.Donor > 0 {
			saved[r.Donor-1] += max(0, r.Src+r.Len-max(r.Src, donors[r.Donor-1].TailFrom))
		}
	}
	if prefixDonor >= 0 {
		saved[prefixDonor] += max(0, from-max(kept, donors[prefixDonor].TailFrom))
	}
	out, dropped := runs[:0:0], 0
	for _, r := range runs {
		if r.Donor > 0 && saved[r.Donor-1] > 0 && !policy.DonorWorthCopying(saved[r.Donor-1], perToken, donors[r.Donor-1].CopySeconds) {
			keep := max(0, min(r.Len, donors[r.Donor-1].TailFrom-r.Src))
			dropped += r.Len - keep
			if keep == 0 {
				continue
			}
			r.Len = keep
		}
		out = append(out, r)
	}
	return out, dropped
}

// moreRuns adds to runs (the session's own segments, past from) its own
// segments matched once more, anywhere in its tape and for a segment the
// change cut too (an agent's "Done." reply after the generation prompt the
// tape ended with; not for an exact turn), then the donors' segments, then
// what a donor's common prefix with the prompt adds past from (at other
// positions, or approximate there) that no segment run covers; last it
// drops the runs of donors whose copy would take longer than prefilling
// (worthCopying) and returns how many tokens it dropped.
func moreRuns(tape *Tape, target Prompt, donors []Donor, held []policy.HeldTape, runs []policy.ReuseRun, kept, from, prefixDonor int, own bool, perToken float64) ([]policy.ReuseRun, int) {
	spans := spanRanges(target.Spans)
	if own && kept < len(target.Tokens) && len(tape.tokens) > 0 {
		self := []policy.HeldTape{{Tokens: tape.tokens, Spans: spanRanges(tape.spans)}}
		extra := policy.MatchDonorSegments(self, target.Tokens, spans, from, runs)
		for i := range extra {
			extra[i].Donor = 0
		}
		runs = policy.MergeRuns(runs, extra, from)
	}
	runs = policy.MergeRuns(runs, policy.MatchDonorSegments(held, target.Tokens, spans, from, runs), from)
	if d, end := policy.DonorPrefix(commonOnly(held), target.Tokens, from); d >= 0 {
		runs = policy.MergeRuns(runs, policy.PrefixGaps(runs, from, end, d+1), from)
	}
	return worthCopying(donors, runs, perToken, prefixDonor, kept, from)
}

// donorFailed records in r that copying from other sessions failed with
// err (the receiving session intact) and returns no copies: the tokens
// the donors would have given are prefilled instead, so a failing donor
// costs time, never the turn.
func donorFailed(r *SyncResult, err error) donorCopy {
	if r.ReuseChoice != "" {
		r.ReuseChoice += "; "
	}
	r.ReuseChoice += fmt.Sprintf("copying from other sessions failed (%v): prefilled instead", err)
	return donorCopy{}
}

func (d *denseLayout) DonorCopy(EngineCopy) func(context.Context, []policy.SpanRange) ([]DonorPiece, bool, error) {
	return nil
}

// DonorFacts: a dense tape sits at its positions; all of it is in the
// engine state.
func (d *denseLayout) DonorFacts() (exact, tailFrom int) {
	return d.tape.ExactTokens(len(d.tape.tokens)), 0
}
