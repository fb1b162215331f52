package layout

import (
	"context"
	"fmt"
	"sort"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
)

// Segment reuse past an early change (dense sessions). When a prompt
// differs from the tape at an early token, the tape's later segments whose
// tokens equal segments of the prompt keep their KV: it is moved to the new
// positions (a RoPE shift, so it is approximate: it was computed after a
// different prefix) and only the rest is prefilled. policy.MatchSegments
// finds the runs, policy.PlanSegmentReuse decides which are moved and how
// much of each is recomputed; this file carries the plan out.
//
// The engine decodes only right after the last position a sequence holds
// (llama.cpp keeps a sequence's positions consecutive), so the moved runs
// are taken out as bytes first, everything past the kept prefix removed,
// and then, in position order, each gap is prefilled and the next run put
// back at its new position (InsertRange shifts it). After every step the
// tape is the prompt's first tokens and the KV equals it, so a failure or a
// cancellation leaves a shorter, consistent tape.

// SpanRanges are spans as policy's ranges.
func SpanRanges(spans []Span) []policy.SpanRange { return spanRanges(spans) }

// spanRanges are spans as policy's ranges.
func spanRanges(spans []Span) []policy.SpanRange {
	out := make([]policy.SpanRange, len(spans))
	for i, sp := range spans {
		out[i] = policy.SpanRange{Start: sp.Start, End: sp.End}
	}
	return out
}

// withTail is target followed by the tape's tokens from from on (what the
// session held after the run that ends target: the earlier conversation),
// their spans shifted with them: an ensure-prefix call (keepTail) keeps
// what followed its prefix, moved behind the new one, as it keeps a tape
// that extends the prefix. tail is the run that moves it.
func (t *Tape) withTail(target Prompt, from int) (Prompt, policy.ReuseRun) {
	out := Prompt{Tokens: append(append([]engine.Token(nil), target.Tokens...), t.tokens[from:]...), Turn: target.Turn, Exact: target.Exact}
	out.Spans = append(make([]Span, 0, len(target.Spans)+len(t.spans)), target.Spans...)
	delta := len(target.Tokens) - from
	for _, sp := range t.spans {
		if sp.Start >= from {
			sp.Start += delta
			sp.End += delta
			out.Spans = append(out.Spans, sp)
		}
	}
	return out, policy.ReuseRun{Src: from, Dst: len(target.Tokens), Len: len(t.tokens) - from}
}

// segmentReuse is a plan to carry out: the prompt to synchronise to
// (target, or target followed by what the session held after it) and
// which held runs move where.
type segmentReuse struct {
	full Prompt
	plan policy.SegmentReusePlan
	// matchedIn are the matched tokens inside target (not its moved tail).
	matchedIn int
	// prefixDonor is the donor whose exact prefix extends the kept one to
	// prefixEnd (-1: none; prefixEnd is then kept).
	prefixDonor, prefixEnd int
}

// moves reports whether the plan copies or moves anything.
func (sr segmentReuse) moves(kept int) bool { return len(sr.plan.Runs) > 0 || sr.prefixEnd > kept }

// planReuse matches target's segments past kept (where it first differs
// from the tape) with the tape's and, for those it does not hold, with
// the donors' (target.Donors), and asks policy what to move. With
// exactEnd (the session's kept prefix sits at its tape positions) a
// donor's exact prefix equal to target's may extend kept (copied at the
// same positions), up to exactEnd of where it ends and the tokens the
// prompt will hold; what it leaves is the donor's common prefix, copied
// approximately. ok is false when nothing is moved: the
// caller prefills past kept as usual.
func planReuse(env *Env, tape *Tape, target Prompt, kept, limit int, needLogits, keepTail bool, exactEnd func(end, total int) int, r *SyncResult) (segmentReuse, bool, error) {
	donors := target.Donors
	if env.Reuse == nil || (kept >= len(tape.tokens) && len(donors) == 0) {
		return segmentReuse{}, false, nil
	}
	set := env.Reuse()
	mode := set.Mode
	if target.Exact {
		mode = policy.ReuseExact
	}
	if mode == policy.ReuseExact {
		donors = nil // an exact turn never copies another session's KV
		if kept >= len(tape.tokens) {
			return segmentReuse{}, false, nil
		}
	}
	held := heldTapes(donors)
	prefixDonor, from := -1, kept
	perToken := set.Cost.TurnSeconds(1, len(target.Tokens))
	declined := 0 // tokens other sessions hold, prefilled because a copy would take longer
	full := target
	var runs []policy.ReuseRun
	if kept < len(tape.tokens) {
		runs = policy.MatchSegments(tape.tokens, spanRanges(tape.spans), target.Tokens, spanRanges(target.Spans), kept)
	}
	if keepTail {
		// An ensure-prefix call keeps what the tape held after its last
		// run (or after kept): the conversation, or a side request's
		// closing instruction, that the prefill-suffix call repeating it
		// reuses, moved behind the new prefix.
		tailFrom, floor := kept, 0
		if n := len(runs); n > 0 {
			tailFrom = runs[n-1].Src + runs[n-1].Len
			floor = tailFrom
		}
		// A segment the change cut keeps all its tokens in the tail (its
		// head stays in place too), so the next call matches it whole.
		for _, sp := range tape.spans {
			if sp.Start < tailFrom && tailFrom < sp.End && sp.Start >= floor {
				tailFrom = sp.Start
				break
			}
		}
		if tailFrom < len(tape.tokens) {
			var tail policy.ReuseRun
			full, tail = tape.withTail(target, tailFrom)
			runs = append(runs, tail)
		}
	}
	if exactEnd != nil {
		prefixDonor, from = policy.DonorPrefix(held, target.Tokens, kept)
		if prefixDonor >= 0 {
			if from = max(kept, exactEnd(from, len(full.Tokens))); from == kept {
				prefixDonor = -1
			}
		}
		if prefixDonor >= 0 {
			// What only the donor's engine state holds is weighed against
			// that copy's cost (a hot set's sealed blocks are not).
			tailFrom := max(kept, donors[prefixDonor].TailFrom)
			if from > tailFrom && !policy.DonorWorthCopying(from-tailFrom, perToken, donors[prefixDonor].CopySeconds) {
				// Not worth it alone: the same tokens come back below as
				// the donor's common prefix, weighed with its other runs.
				from = tailFrom
				if from == kept {
					prefixDonor = -1
				}
			}
		}
	}
	runs, dropped := moreRuns(tape, target, donors, held, runs, kept, from, prefixDonor, mode != policy.ReuseExact, perToken)
	declined += dropped
	if declined > 0 {
		// The policy chose to prefill them: they count as recomputed,
		// within the budget the turn reports.
		r.Budget += declined
		r.Recomputed += declined
		r.ReuseChoice = fmt.Sprintf("%d tokens other sessions hold prefilled: copying them would take longer", declined)
	}
	if (len(runs) == 0 && from == kept) || len(full.Tokens) > limit {
		return segmentReuse{}, false, nil
	}
	plan, err := policy.PlanSegmentReuse(policy.SegmentReuseInput{
		Mode: mode, Kept: from, PromptTokens: len(full.Tokens), Runs: runs, NeedLogits: needLogits,
		Cost: set.Cost, LatencySeconds: set.LatencySeconds,
	})
	if err != nil {
		return segmentReuse{}, false, fmt.Errorf("%w: %w", protocol.ErrInternal, err)
	}
	if declined > 0 {
		r.ReuseChoice += "; "
	}
	r.ReuseChoice += plan.Choice + donorNote(donors, plan.Runs, prefixDonor, kept, from)
	r.Budget += plan.BudgetTokens
	matchedIn := declined
	for _, run := range runs {
		matchedIn += max(0, min(run.Dst+run.Len, len(target.Tokens))-run.Dst)
	}
	sr := segmentReuse{full: full, plan: plan, matchedIn: matchedIn, prefixDonor: prefixDonor, prefixEnd: from}
	if !sr.moves(kept) {
		r.Recomputed = matchedIn // nothing moves: every matched token is prefilled again
	}
	return sr, sr.moves(kept), nil
}

// countReuse fills r after a segment-reuse sync that kept the first kept
// tokens (approxKept of them approximate; kept counts a donor's exact
// prefix copied) and moved the runs in moved, counting within target
// only: a moved tail is the next call's prefix.
func countReuse(r *SyncResult, tape *Tape, target Prompt, sr segmentReuse, kept, approxKept int, moved []policy.ReuseRun) {
	lim := min(len(tape.tokens), len(target.Tokens))
	in := 0
	for _, run := range moved {
		in += max(0, min(run.Dst+run.Len, lim)-run.Dst)
	}
	r.Reused, r.Approximate = kept+in, approxKept+in
	r.Prefilled = lim - r.Reused
	// Recomputed inside target: its matched tokens not moved (a moved
	// tail's recomputed head is the next call's reuse).
	r.Recomputed = max(0, min(sr.matchedIn-in, r.Prefilled))
	tape.spans = ClipSpans(sr.full.Spans, len(tape.tokens))
}

// segmentSync tries segment reuse for target, which differs from the tape
// at kept. done reports that it synchronised the tape (r filled); false
// with a nil error: the caller prefills past kept as usual.
func (d *denseLayout) segmentSync(ctx context.Context, target Prompt, kept int, needLogits, keepTail bool, r *SyncResult) (bool, error) {
	tape := d.tape
	sr, ok, err := planReuse(d.env, tape, target, kept, d.env.ContextTokens, needLogits, keepTail, func(end, _ int) int { return end }, r)
	if !ok || err != nil {
		return false, err
	}
	full, plan := sr.full, sr.plan
	// Take the moved runs out before anything is removed.
	var pieces []kvPiece
	for _, run := range plan.Runs {
		if run.Donor > 0 {
			continue
		}
		rg, err := d.env.Engine.ExtractRange(run.Src, run.Src+run.Len)
		if err != nil {
			return true, EngineErr(err)
		}
		pieces = append(pieces, kvPiece{dst: run.Dst, r: rg})
	}
	approxKept := kept - tape.ExactTokens(kept)
	n, err := d.env.Engine.Remove(kept, -1)
	if err != nil {
		return true, fmt.Errorf("%w: %w", protocol.ErrInternal, err)
	}
	r.Dropped = n
	tape.Keep(kept)
	base := kept // the tokens kept in place (then with a donor's exact prefix)
	var moved []policy.ReuseRun
	defer func() { countReuse(r, tape, target, sr, base, approxKept, moved) }()
	dc, lost, err := copyFromDonors(ctx, target.Donors, plan.Runs, sr.prefixDonor, kept, sr.prefixEnd)
	if lost {
		tape.Keep(0)
		base, approxKept = 0, 0
	}
	if err != nil {
		if lost || ctx.Err() != nil {
			return true, err
		}
		dc = donorFailed(r, err) // the copy is an optimisation: its failure costs a prefill, not the turn
	}
	r.Budget += dc.declined
	tape.logitsAt = -1
	for _, pc := range dc.prefix { // at the donor's positions: exact
		if pc.dst != len(tape.tokens) {
			break // a hole: the rest is prefilled
		}
		lo, n := pc.want()
		if err := insertPart(d.env.Engine, pc.r, lo, n, pc.dst); err != nil {
			return true, EngineErr(err)
		}
		tape.tokens = append(tape.tokens, full.Tokens[pc.dst:pc.dst+n]...)
		base = len(tape.tokens)
	}
	pieces = mergePieces(pieces, dc.runs)
	for i, pc := range pieces {
		if pc.dst < len(tape.tokens) {
			continue // covered by what a short exact prefix left to prefill
		}
		if err := d.prefill(ctx, full, len(tape.tokens), pc.dst); err != nil {
			return true, err
		}
		lo, n := pc.want()
		if err := insertPart(d.env.Engine, pc.r, lo, n, pc.dst); err != nil {
			return true, EngineErr(err)
		}
		pieces[i] = kvPiece{} // let its bytes go
		tape.markApprox(pc.dst)
		tape.tokens = append(tape.tokens, full.Tokens[pc.dst:pc.dst+n]...)
		tape.logitsAt = -1
		moved = append(moved, policy.ReuseRun{Dst: pc.dst, Len: n})
	}
	if err := d.prefill(ctx, full, len(tape.tokens), len(full.Tokens)); err != nil {
		return true, err
	}
	return true, nil
}

// mergePieces merges two lists of pieces, each in order of destination.
func mergePieces(a, b []kvPiece) []kvPiece {
	out := append(append(make([]kvPiece, 0, len(a)+len(b)), a...), b...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].dst < out[j].dst })
	return out
}
