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
// Its layout keeps the KV equal to it; the daemon's calls read it and
// extend its spans. Guarded by the engine token.
type Tape struct {
	Tokens []engine.Token
	Spans  []Span
	// LogitsAt is the tape length for which the engine holds the last
	// token's logits, or -1.
	LogitsAt int
	// ExpireFrom is the first tape index the next sync may not reuse (an
	// invalidate_on_turn segment of an ended turn), or -1.
	ExpireFrom int
}

// NewTape is an empty tape.
func NewTape() Tape { return Tape{LogitsAt: -1, ExpireFrom: -1} }

// Reset empties the tape.
func (t *Tape) Reset() {
	t.Tokens, t.Spans, t.LogitsAt = nil, nil, -1
}

// ReusablePrefix is the longest common prefix of the tape and target that
// may be kept: it stops at an expired invalidate_on_turn segment.
func (t *Tape) ReusablePrefix(target []engine.Token) int {
	lcp := CommonPrefix(t.Tokens, target)
	if t.ExpireFrom >= 0 && lcp > t.ExpireFrom {
		lcp = t.ExpireFrom
	}
	return lcp
}

// Keep keeps Tokens[:n] in the bookkeeping (spans, expiry, logits); the
// layout has already removed the KV from n on.
func (t *Tape) Keep(n int) {
	if t.ExpireFrom >= n {
		t.ExpireFrom = -1 // the expired tokens are gone
	}
	t.Tokens = t.Tokens[:n]
	t.Spans = ClipSpans(t.Spans, n)
	if t.LogitsAt > n {
		t.LogitsAt = -1
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
}

// SyncResult counts what one tape synchronisation did.
type SyncResult struct {
	PromptTokens, Reusable, Reused, Prefilled, Dropped int
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
