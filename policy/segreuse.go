package policy

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrInvalidReuse reports a SegmentReuseInput that cannot be planned:
// runs out of order, overlapping, outside the prompt or the held tokens,
// or a cost model that is negative or not finite.
var ErrInvalidReuse = errors.New("policy: invalid segment reuse input")

// ReuseMode is how a turn may reuse KV past the first changed token.
type ReuseMode int

const (
	// ReuseAuto reuses the KV of unchanged segments past an early change
	// (moved to their new positions, approximate) only when prefilling
	// them again would not fit the turn's latency target, and recomputes
	// as much of them as the target leaves room for.
	ReuseAuto ReuseMode = iota
	// ReuseExact never reuses past the first changed token: every turn is
	// bit-exact with a cold prefill.
	ReuseExact
)

// String names the mode as the daemon's flag spells it.
func (m ReuseMode) String() string {
	if m == ReuseExact {
		return "exact"
	}
	return "auto"
}

// ParseReuseMode parses "auto" or "exact".
func ParseReuseMode(s string) (ReuseMode, error) {
	switch s {
	case "auto", "":
		return ReuseAuto, nil
	case "exact":
		return ReuseExact, nil
	}
	return 0, fmt.Errorf("%w: reuse mode %q (want auto or exact)", ErrUnknownName, s)
}

// ReuseRun is a run of held tokens equal to a run of the new prompt: the
// KV of held tokens [Src, Src+Len) can serve prompt tokens [Dst, Dst+Len).
// Donor says whose tokens: 0 the session's own tape, i > 0 the tape of
// the i-th donor (another live session, MatchDonorSegments).
type ReuseRun struct {
	Src, Dst, Len int
	Donor         int
}

// SpanRange is a segment's token range [Start, End).
type SpanRange struct{ Start, End int }

// segmentKey identifies a segment's tokens for matching: its length and
// an FNV-1a hash of them (a match is confirmed token by token).
type segmentKey struct {
	n    int
	hash uint64
}

func segmentKeyOf(toks []int32) segmentKey {
	h := uint64(14695981039346656037)
	for _, t := range toks {
		h ^= uint64(uint32(t))
		h *= 1099511628211
	}
	return segmentKey{len(toks), h}
}

// MatchSegments finds, for the prompt's segments that start at or after
// from (the first changed token), held segments with identical tokens that
// also start at or after from, in order, after the unchanged tail of the
// segment the change falls in (changedTail): the runs are increasing in both
// Src and Dst and never overlap, so they can be moved into place one after
// another. Each prompt segment takes the earliest unused held segment
// equal to it; empty segments are skipped.
func MatchSegments(held []int32, heldSpans []SpanRange, prompt []int32, promptSpans []SpanRange, from int) []ReuseRun {
	index := map[segmentKey][]SpanRange{}
	for _, s := range heldSpans {
		if s.Start < from || s.End <= s.Start || s.End > len(held) {
			continue
		}
		k := segmentKeyOf(held[s.Start:s.End])
		index[k] = append(index[k], s)
	}
	var runs []ReuseRun
	nextSrc := from
	if t := changedTail(held, heldSpans, prompt, promptSpans, from); t.Len > 0 {
		runs, nextSrc = append(runs, t), t.Src+t.Len
	}
	for _, s := range promptSpans {
		if s.Start < from || s.End <= s.Start || s.End > len(prompt) {
			continue
		}
		if n := len(runs); n > 0 && s.Start < runs[n-1].Dst+runs[n-1].Len {
			continue // the changed segment, its tail matched above
		}
		want := prompt[s.Start:s.End]
		for _, h := range index[segmentKeyOf(want)] {
			if h.Start < nextSrc || !slices.Equal(held[h.Start:h.End], want) {
				continue
			}
			if n := len(runs); n > 0 && runs[n-1].Src+runs[n-1].Len == h.Start && runs[n-1].Dst+runs[n-1].Len == s.Start {
				runs[n-1].Len += s.End - s.Start // contiguous on both sides: one run
			} else {
				runs = append(runs, ReuseRun{Src: h.Start, Dst: s.Start, Len: s.End - s.Start})
			}
			nextSrc = h.End
			break
		}
	}
	return runs
}

// SegmentReuseInput is what PlanSegmentReuse weighs.
type SegmentReuseInput struct {
	Mode ReuseMode
	// Kept is the common prefix kept exactly; PromptTokens the new
	// prompt's length.
	Kept, PromptTokens int
	// Runs are the candidate runs (MatchSegments), past Kept.
	Runs []ReuseRun
	// NeedLogits: the prompt's last token must be decoded (its logits
	// are sampled from), so a run ending the prompt gives it up.
	NeedLogits bool
	// Cost is the measured prefill cost model; LatencySeconds the turn's
	// latency target (<= 0: none, and then nothing is approximated).
	Cost           PrefillCost
	LatencySeconds float64
}

// SegmentReusePlan is PlanSegmentReuse's outcome.
type SegmentReusePlan struct {
	// Runs are the held runs whose KV is moved into place, after each
	// gave up its recomputed head; empty: prefill everything past Kept.
	Runs []ReuseRun
	// Approximate are the tokens whose KV is moved (the Runs' lengths);
	// Recomputed the tokens of matched segments prefilled again (their
	// heads, whole runs too short to keep, the last token for logits);
	// New the prompt tokens past Kept that matched nothing.
	Approximate, Recomputed, New int
	// BudgetTokens is the recompute budget the latency target left.
	BudgetTokens int
	// Choice says why, for logs and explain.
	Choice string
}

// Validate checks the runs lie past Kept, inside the prompt, in order and
// disjoint in the prompt (their sources may lie anywhere: every layout
// copies the runs' KV out before it changes anything), and the cost model
// is usable.
func (in SegmentReuseInput) Validate() error {
	if in.Kept < 0 || in.PromptTokens < in.Kept {
		return fmt.Errorf("%w: kept %d of a %d-token prompt", ErrInvalidReuse, in.Kept, in.PromptTokens)
	}
	if !nonNegativeFinite(in.Cost.BaseSeconds) || !nonNegativeFinite(in.Cost.PerContextSeconds) || math.IsNaN(in.LatencySeconds) {
		return fmt.Errorf("%w: cost %g s + %g s per context token, latency %g s", ErrInvalidReuse, in.Cost.BaseSeconds, in.Cost.PerContextSeconds, in.LatencySeconds)
	}
	dst := in.Kept
	for _, r := range in.Runs {
		if r.Len <= 0 || r.Src < 0 || r.Donor < 0 || r.Dst < dst || r.Dst+r.Len > in.PromptTokens {
			return fmt.Errorf("%w: run %+v after dst %d in a %d-token prompt", ErrInvalidReuse, r, dst, in.PromptTokens)
		}
		dst = r.Dst + r.Len
	}
	return nil
}

// PlanSegmentReuse decides which matched runs keep their (moved,
// approximate) KV and how much of each is recomputed.
//
// Exact mode, or no runs, prefills everything past Kept. Otherwise the
// recompute budget is what the latency target leaves after the new
// tokens: (LatencySeconds − Cost.TurnSeconds(new, prompt)) divided by the
// cost of one token at the prompt's length, never a constant. When the
// budget covers every matched token the turn is exact (nothing is worth
// approximating). Otherwise the budget is spread over the runs' first
// tokens in equal shares (EPIC: a chunk's first tokens, which attend to
// the changed prefix the least, are where reused KV deviates most): a run
// shorter than its share is recomputed whole and its unused share goes to
// the others. With NeedLogits a run that ends the prompt gives up its last
// token. Every plan prefills at most New + BudgetTokens (+1 for logits).
func PlanSegmentReuse(in SegmentReuseInput) (SegmentReusePlan, error) {
	if err := in.Validate(); err != nil {
		return SegmentReusePlan{}, err
	}
	var matched int
	for _, r := range in.Runs {
		matched += r.Len
	}
	p := SegmentReusePlan{New: in.PromptTokens - in.Kept - matched}
	switch {
	case in.Mode == ReuseExact:
		p.Recomputed, p.Choice = matched, "exact: reuse past a change is off"
		return p, nil
	case matched == 0:
		p.Choice = "no unchanged segment after the first change"
		return p, nil
	case in.LatencySeconds <= 0:
		p.Recomputed, p.Choice = matched, "exact: no latency target to trade fidelity against"
		return p, nil
	}
	perToken := in.Cost.TurnSeconds(1, in.PromptTokens)
	slack := in.LatencySeconds - in.Cost.TurnSeconds(p.New, in.PromptTokens)
	switch {
	case perToken <= 0:
		p.BudgetTokens = matched // free prefill: recompute everything
	case slack > 0:
		p.BudgetTokens = int(math.Min(float64(matched), math.Floor(slack/perToken)))
	}
	if p.BudgetTokens >= matched {
		p.Recomputed = matched
		p.Choice = fmt.Sprintf("exact: prefilling the %d matched tokens again fits the %.3g s latency target", matched, in.LatencySeconds)
		return p, nil
	}
	heads := spreadBudget(in.Runs, p.BudgetTokens)
	for i, r := range in.Runs {
		h, tail := heads[i], 0
		if in.NeedLogits && i == len(in.Runs)-1 && r.Dst+r.Len == in.PromptTokens && h < r.Len {
			tail = 1 // the last token is decoded for its logits
		}
		p.Recomputed += h + tail
		if h+tail >= r.Len {
			continue
		}
		p.Runs = append(p.Runs, ReuseRun{Src: r.Src + h, Dst: r.Dst + h, Len: r.Len - h - tail, Donor: r.Donor})
		p.Approximate += r.Len - h - tail
	}
	p.Choice = fmt.Sprintf("approximate: %d of %d matched tokens moved, %d recomputed (budget %d tokens: prefilling all would exceed the %.3g s latency target)",
		p.Approximate, matched, p.Recomputed, p.BudgetTokens, in.LatencySeconds)
	return p, nil
}

// spreadBudget shares budget over the runs' heads in equal parts, a run
// taking at most its length; what a short run leaves goes to the others
// (earlier runs first for the remainder).
func spreadBudget(runs []ReuseRun, budget int) []int {
	heads := make([]int, len(runs))
	open := len(runs)
	for budget > 0 && open > 0 {
		share, extra := budget/open, budget%open
		spent := 0
		for i, r := range runs {
			if heads[i] >= r.Len {
				continue
			}
			give := share
			if extra > 0 {
				give++
				extra--
			}
			give = min(give, r.Len-heads[i])
			heads[i] += give
			spent += give
		}
		budget -= spent
		open = 0
		for i, r := range runs {
			if heads[i] < r.Len {
				open++
			}
		}
		if spent == 0 {
			break
		}
	}
	return heads
}

// changedTail is the run of the segment holding the first change (from)
// whose tokens after the change are the held segment's: the common suffix
// of the held and the prompt segment that hold token from, past from in
// both. An edit inside a long segment (a date, a line of AGENTS.md, a
// file listing in a system prompt) then costs the edited tokens, not the
// rest of the segment; the tokens after it are approximate like any moved
// run's. Only an edited segment has one: the two start at the same token,
// neither is equal to a whole segment on the other side past from (a
// segment inserted, removed or moved is matched whole, or not at all),
// and the tail is longer than the edit on either side (two different
// messages share their last tokens, a template's end-of-turn marker,
// which are no tail: a session's ensure-prefix call keeps such a cut
// segment whole behind the new prefix instead, for its suffix call).
// Len 0 otherwise.
func changedTail(held []int32, heldSpans []SpanRange, prompt []int32, promptSpans []SpanRange, from int) ReuseRun {
	h, okH := spanHolding(heldSpans, from, len(held))
	p, okP := spanHolding(promptSpans, from, len(prompt))
	if !okH || !okP || h.Start != p.Start ||
		hasEqual(held[h.Start:h.End], prompt, promptSpans, from) || hasEqual(prompt[p.Start:p.End], held, heldSpans, from) {
		return ReuseRun{}
	}
	k, most := 0, min(h.End-from, p.End-from)
	for k < most && held[h.End-1-k] == prompt[p.End-1-k] {
		k++
	}
	if k == 0 || k <= max(h.End-k-from, p.End-k-from) {
		return ReuseRun{} // no tail, or more edit than tail: two different texts
	}
	return ReuseRun{Src: h.End - k, Dst: p.End - k, Len: k}
}

// hasEqual reports whether a segment of spans over toks, starting at or
// after from, holds exactly want.
func hasEqual(want, toks []int32, spans []SpanRange, from int) bool {
	for _, s := range spans {
		if s.Start >= from && s.End <= len(toks) && s.End-s.Start == len(want) && slices.Equal(toks[s.Start:s.End], want) {
			return true
		}
	}
	return false
}

// spanHolding is the well-formed span of spans (inside n tokens) that
// holds index i.
func spanHolding(spans []SpanRange, i, n int) (SpanRange, bool) {
	for _, s := range spans {
		if s.Start <= i && i < s.End && s.End <= n {
			return s, true
		}
	}
	return SpanRange{}, false
}
