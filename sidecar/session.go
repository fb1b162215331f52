package sidecar

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// span attributes a run of tape tokens to the segment that produced them.
type span struct {
	seg        policy.Segment // Text is cleared: the tape holds the tokens
	start, end int
	generated  bool
}

// session is one agent conversation: a tape of tokens whose KV is resident
// in the slot's sequence 0 or parked in host memory.
type session struct {
	id     uint64
	name   string
	connID uint64
	busy   sync.Mutex // one call at a time (TryLock → ErrSessionBusy)

	// Guarded by the slot token.
	tape     []engine.Token
	spans    []span
	manifest *policy.Manifest // from the last EnsurePrefix
	compat   string
	parked   *engine.SeqState
	// logitsAt is the tape length for which the engine holds the last
	// token's logits, or -1.
	logitsAt int
	tokCache map[[32]byte][]engine.Token
	lastUsed time.Time
	closed   bool
	layout   layout // how the tape sits in the engine: dense or a hot set

	// expireFrom is the first tape index the next sync may not reuse (an
	// invalidate_on_turn segment of an ended turn), or -1.
	expireFrom   int
	version      uint64 // counts calls that may have changed the tape
	savedVersion uint64 // version at the last snapshot
	lastRestore  *pb.RestoreReport
	ephemeral    bool // opened "cold": never resumed, never snapshotted automatically

	// explained is what Explain reports, published under the slot token
	// at the end of each call and when a long call yields (view.go).
	explained atomic.Pointer[pb.ExplainReply]
}

func newSession(id uint64, name string, connID uint64) *session {
	return &session{id: id, name: name, connID: connID, logitsAt: -1, expireFrom: -1, tokCache: map[[32]byte][]engine.Token{}, lastUsed: time.Now()}
}

// lockBusy takes the session's call lock, waiting for a call in flight
// to end, or gives up when ctx ends.
func (s *session) lockBusy(ctx context.Context) error {
	for delay := 50 * time.Microsecond; !s.busy.TryLock(); delay = min(2*delay, 10*time.Millisecond) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
	return nil
}

func (s *session) resetTape() {
	s.tape, s.spans, s.logitsAt = nil, nil, -1
}

// syncResult counts what one tape synchronisation did.
type syncResult struct {
	promptTokens, reusable, reused, prefilled, dropped int
}

// prompt is a tokenized run of segments.
type prompt struct {
	tokens []engine.Token
	spans  []span
	// turn is where the tokens the turn brings start (its volatile
	// segments): what retrieval asks with. 0 when not a turn.
	turn int
}

// tokenizeSegments renders segments into tokens, BOS first when first is
// set. Each segment is tokenized on its own, so a segment's tokens never
// depend on its neighbours and reuse boundaries are stable.
func (srv *Server) tokenizeSegments(sess *session, segs []policy.Segment, first bool, pos0 int) (prompt, error) {
	var p prompt
	m := srv.slot.model
	if first && srv.slot.facts.AddBOS {
		p.tokens = append(p.tokens, srv.slot.facts.BOS)
		p.spans = append(p.spans, span{seg: policy.Segment{ID: "<bos>", Kind: policy.KindSystem, Class: policy.ClassTaskPinned, Stable: true}, start: pos0, end: pos0 + 1})
	}
	for _, seg := range segs {
		key := seg.Digest()
		toks, ok := sess.tokCache[key]
		if len(seg.Tokens) > 0 {
			vocab := int32(srv.slot.facts.VocabSize)
			for j, t := range seg.Tokens {
				if t >= vocab {
					return prompt{}, fmt.Errorf("%w: segment %q: token %d at %d is outside the vocabulary [0,%d)", protocol.ErrInvalidManifest, seg.ID, t, j, vocab)
				}
			}
			toks, ok = seg.Tokens, true
		}
		if !ok {
			var err error
			toks, err = tokenizeSegment(m, seg)
			if err != nil {
				return prompt{}, fmt.Errorf("%w: segment %q: %w", protocol.ErrInvalidManifest, seg.ID, err)
			}
			if len(sess.tokCache) > 8192 {
				clear(sess.tokCache)
			}
			sess.tokCache[key] = toks
		}
		start := pos0 + len(p.tokens)
		p.tokens = append(p.tokens, toks...)
		meta := seg
		meta.Text, meta.Tokens, meta.Control = "", nil, nil
		p.spans = append(p.spans, span{seg: meta, start: start, end: pos0 + len(p.tokens)})
	}
	return p, nil
}

// tokenizeSegment tokenizes one segment's text: its control spans with the
// model's special-token texts parsed, every other run with them left as
// text, so only the spans a chat template wrote become control tokens. A
// span whose text is no special token of this model (it tokenizes the same
// either way) stays part of the text around it, so a model without the
// template's control tokens gets exactly the tokens of its text.
func tokenizeSegment(m engine.Model, seg policy.Segment) ([]engine.Token, error) {
	if len(seg.Control) == 0 {
		return m.Tokenize(seg.Text, false)
	}
	var out []engine.Token
	run := 0 // start in seg.Text of the text not yet tokenized
	flush := func(end int) error {
		if end > run {
			toks, err := m.Tokenize(seg.Text[run:end], false)
			if err != nil {
				return err
			}
			out = append(out, toks...)
		}
		return nil
	}
	for _, c := range seg.Control {
		span := seg.Text[c.Start:c.End]
		special, err := m.TokenizeSpecial(span)
		if err != nil {
			return nil, err
		}
		plain, err := m.Tokenize(span, false)
		if err != nil {
			return nil, err
		}
		if slices.Equal(special, plain) {
			continue // no control token: text
		}
		if err := flush(c.Start); err != nil {
			return nil, err
		}
		out = append(out, special...)
		run = c.End
	}
	if err := flush(len(seg.Text)); err != nil {
		return nil, err
	}
	return out, nil
}

// refreshLogits recomputes the tape's last token (in hot-set mode, the
// rest of its block) so the engine holds the logits to sample from.
func (s *session) refreshLogits(ctx context.Context) error {
	n := len(s.tape)
	spans := append([]span(nil), s.spans...)
	kept, err := s.layout.cut(n - 1)
	if err != nil {
		return err
	}
	// keepTape only reslices: the dropped tokens are still in the array.
	redo := append([]engine.Token(nil), s.tape[kept:n]...)
	s.tape = s.tape[:kept]
	s.spans = spans
	if err := s.layout.appendTokens(ctx, redo); err != nil {
		s.spans = clipSpans(spans, len(s.tape))
		return err
	}
	return nil
}

// reusablePrefix is the longest common prefix of the tape and target that
// may be kept: it stops at an expired invalidate_on_turn segment.
func (s *session) reusablePrefix(target []engine.Token) int {
	lcp := commonPrefix(s.tape, target)
	if s.expireFrom >= 0 && lcp > s.expireFrom {
		lcp = s.expireFrom
	}
	return lcp
}

// keepTape keeps tape[:n] in the bookkeeping (spans, expiry, logits); the
// layout has already removed the KV from n on.
func (s *session) keepTape(n int) {
	if s.expireFrom >= n {
		s.expireFrom = -1 // the expired tokens are gone
	}
	s.tape = s.tape[:n]
	s.spans = clipSpans(s.spans, n)
	if s.logitsAt > n {
		s.logitsAt = -1
	}
}

func clipSpans(spans []span, n int) []span {
	out := make([]span, 0, len(spans))
	for _, sp := range spans {
		if sp.start >= n {
			break
		}
		sp.end = min(sp.end, n)
		out = append(out, sp)
	}
	return out
}

func commonPrefix(a, b []engine.Token) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// engineErr maps engine errors onto protocol sentinels.
func engineErr(err error) error {
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
