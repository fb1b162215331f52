package layout

import (
	"context"
	"errors"
	"fmt"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
)

// Tape is a session's stream of tokens and what the engine holds of it.
// Only its layout writes it, keeping the KV equal to it; the daemon's calls
// read it and mark a decode's generated tokens and the end of a turn
// through its methods. Guarded by the engine token.
type Tape struct {
	tokens []engine.Token
	spans  []Span
	// logitsAt is the tape length for which the engine holds the last
	// token's logits, or -1.
	logitsAt int
	// expireFrom is the first tape index the next sync may not reuse (an
	// invalidate_on_turn segment of an ended turn), or -1.
	expireFrom int
	// approxFrom is the first tape index whose KV is not what a cold
	// prefill of the tape would compute (a segment moved past an early
	// change, and everything after it), or -1: only the layout sets it.
	approxFrom int
}

// NewTape is an empty tape.
func NewTape() Tape { return Tape{logitsAt: -1, expireFrom: -1, approxFrom: -1} }

// Len is the number of tokens on the tape.
func (t *Tape) Len() int { return len(t.tokens) }

// Tokens are the tape's tokens; the caller must not modify them.
func (t *Tape) Tokens() []engine.Token { return t.tokens }

// Spans attribute the tape's tokens to segments; the caller must not
// modify them.
func (t *Tape) Spans() []Span { return t.spans }

// HasLogits reports whether the engine holds the last token's logits.
func (t *Tape) HasLogits() bool { return t.logitsAt == len(t.tokens) }

// LogitsLost records that the engine no longer holds the last logits (the
// session was parked, or its KV copied out).
func (t *Tape) LogitsLost() { t.logitsAt = -1 }

// BeginGenerated opens a span for the tokens a decode is about to append.
func (t *Tape) BeginGenerated() {
	n := len(t.tokens)
	t.spans = append(t.spans, Span{Seg: policy.Segment{ID: "<generated>", Kind: policy.KindUserTurn, Class: policy.ClassVolatile}, Start: n, End: n, Generated: true})
}

// MarkGenerated extends the open generated span over the tokens appended
// since BeginGenerated.
func (t *Tape) MarkGenerated() {
	if n := len(t.spans); n > 0 && t.spans[n-1].Generated {
		t.spans[n-1].End = len(t.tokens)
	}
}

// EndTurn closes the generated span (dropping it when nothing was
// generated) and expires the turn's invalidate_on_turn segments: the next
// sync reuses nothing from the first of them on.
func (t *Tape) EndTurn() {
	if n := len(t.spans); n > 0 && t.spans[n-1].Generated {
		if t.spans[n-1].Start == len(t.tokens) {
			t.spans = t.spans[:n-1]
		} else {
			t.spans[n-1].End = len(t.tokens)
		}
	}
	t.expireFrom = -1
	for _, sp := range t.spans {
		if policy.TurnInvalidates(sp.Seg) {
			t.expireFrom = sp.Start
			break
		}
	}
}

// RefreshLogits recomputes the tape's last token (in hot-set mode, the
// rest of its block) so the engine holds the logits to sample from.
func RefreshLogits(ctx context.Context, l Layout, t *Tape) error {
	n := len(t.tokens)
	spans := append([]Span(nil), t.spans...)
	kept, err := l.Cut(ctx, n-1)
	if err != nil {
		return err
	}
	// Cut only reslices: the dropped tokens are still in the array.
	redo := append([]engine.Token(nil), t.tokens[kept:n]...)
	t.tokens = t.tokens[:kept]
	t.spans = spans
	if err := l.AppendTokens(ctx, redo); err != nil {
		t.spans = ClipSpans(spans, len(t.tokens))
		return err
	}
	return nil
}

// Reset empties the tape.
func (t *Tape) Reset() {
	t.tokens, t.spans, t.logitsAt, t.approxFrom = nil, nil, -1, -1
}

// ApproxFrom is the first tape index whose KV is approximate (reused past
// an early change), or -1 when the whole tape is exact.
func (t *Tape) ApproxFrom() int { return t.approxFrom }

// ExactTokens is how many of the tape's first n tokens hold exactly the
// KV a cold prefill computes.
func (t *Tape) ExactTokens(n int) int {
	if t.approxFrom >= 0 {
		return min(n, t.approxFrom)
	}
	return n
}

// markApprox records that the KV from tape index i on is approximate.
func (t *Tape) markApprox(i int) {
	if t.approxFrom < 0 || i < t.approxFrom {
		t.approxFrom = i
	}
}

// ReusablePrefix is the longest common prefix of the tape and target that
// may be kept: it stops at an expired invalidate_on_turn segment and, for
// an exact prompt, at the first approximate token.
func (t *Tape) ReusablePrefix(target Prompt) int {
	lcp := CommonPrefix(t.tokens, target.Tokens)
	if t.expireFrom >= 0 && lcp > t.expireFrom {
		lcp = t.expireFrom
	}
	if target.Exact {
		lcp = t.ExactTokens(lcp)
	}
	return lcp
}

// Keep keeps Tokens[:n] in the bookkeeping (spans, expiry, logits); the
// layout has already removed the KV from n on.
func (t *Tape) Keep(n int) {
	if t.expireFrom >= n {
		t.expireFrom = -1 // the expired tokens are gone
	}
	if t.approxFrom >= n {
		t.approxFrom = -1 // the approximate tokens are gone
	}
	t.tokens = t.tokens[:n]
	t.spans = ClipSpans(t.spans, n)
	if t.logitsAt > n {
		t.logitsAt = -1
	}
}

// Span attributes a run of tape tokens to the segment that produced them.
type Span struct {
	Seg        policy.Segment // Text is cleared: the tape holds the tokens
	Start, End int
	Generated  bool
}

// ClipSpans are spans cut to the first n tokens.
func ClipSpans(spans []Span, n int) []Span {
	out := make([]Span, 0, len(spans))
	for _, sp := range spans {
		if sp.Start >= n {
			break
		}
		sp.End = min(sp.End, n)
		out = append(out, sp)
	}
	return out
}

// CommonPrefix is the length of the longest common prefix of a and b.
func CommonPrefix(a, b []engine.Token) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// Prompt is a tokenized run of segments a tape is synchronised to.
type Prompt struct {
	Tokens []engine.Token
	Spans  []Span
	// Turn is where the tokens the turn brings start (its volatile
	// segments): what retrieval asks with. 0 when not a turn.
	Turn int
	// Exact asks for KV equal to a cold prefill: nothing approximate is
	// kept or moved (the request asked for exact reuse).
	Exact bool
	// Donors are other live sessions of the same model and template whose
	// KV the prompt may copy past its first change (donor.go); the daemon
	// offers none to an exact prompt.
	Donors []Donor
	// Compat is the compatibility key (model, template, KV settings) the
	// prompt's KV is built under: a hot set records it with its parked
	// blocks, so an orphan tape lends segments only under the same key
	// (orphanspans.go); empty: its blocks lend none (a session opened
	// cold).
	Compat string
}

// SyncResult counts what one tape synchronisation did. Reused counts
// every prompt token whose KV was kept or moved rather than prefilled;
// Approximate the part of Reused that is not what a cold prefill computes
// (moved past an early change this call, or kept from an earlier one);
// Recomputed the tokens of unchanged segments prefilled again (a reused
// segment's head, runs too short to move), counted in Prefilled too.
type SyncResult struct {
	PromptTokens, Reusable, Reused, Prefilled, Dropped int
	Approximate, Recomputed                            int
	// ReuseChoice says what segment reuse decided, when it was weighed,
	// and Budget the recompute budget it had (tokens).
	ReuseChoice string
	Budget      int
}

// EngineErr maps engine errors onto protocol sentinels, keeping the cause.
func EngineErr(err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", protocol.ErrCancelled, err)
	case errors.Is(err, engine.ErrContextFull):
		return fmt.Errorf("%w: %w", protocol.ErrResourceExhausted, err)
	case errors.Is(err, engine.ErrInvalidArgument):
		return fmt.Errorf("%w: %w", protocol.ErrInvalidArgument, err)
	default:
		return fmt.Errorf("%w: %w", protocol.ErrInternal, err)
	}
}
