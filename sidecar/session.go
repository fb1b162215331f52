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
	hot      *hotState // hot-set mode; nil for dense sessions

	// expireFrom is the first tape index the next sync may not reuse (an
	// invalidate_on_turn segment of an ended turn), or -1.
	expireFrom   int
	version      uint64 // counts calls that may have changed the tape
	savedVersion uint64 // version at the last snapshot
	lastRestore  *pb.RestoreReport
	cold         bool // no resume, no automatic snapshot

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

// sync makes the tape equal target (tokens and spans), keeping the longest
// common prefix resident and prefilling the rest. With needLogits the last
// token's logits are left in the engine (recomputing one token if all was
// reused). With keepTail a tape that already extends target is left as is.
// The caller holds the slot token and sess is resident.
func (srv *Server) sync(ctx context.Context, sess *session, target prompt, needLogits, keepTail, retrieve bool) (syncResult, error) {
	if sess.hot != nil {
		return srv.hotSync(ctx, sess, target, needLogits, keepTail, retrieve)
	}
	r := syncResult{promptTokens: len(target.tokens)}
	limit := srv.slot.contextTokens()
	if len(target.tokens) > limit {
		return r, protocol.OverflowError{PromptTokens: int64(len(target.tokens)), ContextTokens: int64(limit)}
	}
	lcp := sess.reusablePrefix(target.tokens)
	r.reusable = lcp
	keep := lcp
	if keep == len(target.tokens) {
		if keepTail && !needLogits {
			r.reused = keep
			return r, nil
		}
		if needLogits && keep > 0 && sess.logitsAt != keep {
			keep-- // recompute the last token for its logits
		}
	}
	ectx := srv.slot.ectx
	if keep < len(sess.tape) {
		n, err := ectx.Remove(keep, -1)
		if err != nil {
			return r, fmt.Errorf("%w: %w", protocol.ErrInternal, err)
		}
		r.dropped = n
		sess.truncate(keep)
	}
	if err := srv.prefill(ctx, sess, target, keep); err != nil {
		return r, err
	}
	r.reused = keep
	r.prefilled = len(target.tokens) - keep
	// Adopt target's spans for the tokens it covers.
	sess.spans = target.spans
	return r, nil
}

// prefill decodes target.tokens[from:] in chunks, extending the tape as
// each chunk lands so a cancellation keeps what was done.
func (srv *Server) prefill(ctx context.Context, sess *session, target prompt, from int) error {
	ectx := srv.slot.ectx
	chunk := ectx.Options().BatchTokens * 4
	if wantsProgress(ctx) {
		chunk = ectx.Options().BatchTokens
	}
	for off, end := from, from; off < len(target.tokens); off = end {
		reportProgress(ctx, "prefill", off-from, len(target.tokens)-from)
		step := chunk
		if off > from {
			// Between chunks other sessions' calls get their turns; the
			// spans say what the tape holds so far.
			sess.spans = clipSpans(target.spans, len(sess.tape))
			if err := srv.yield(sess); err != nil {
				return err
			}
		}
		if waiting, _ := srv.slot.token.contended(); waiting {
			step = ectx.Options().BatchTokens // shorter steps while others wait
		}
		end = min(off+step, len(target.tokens))
		if err := ectx.Decode(ctx, target.tokens[off:end], off); err != nil {
			sess.logitsAt = -1
			sess.spans = clipSpans(target.spans, len(sess.tape))
			return engineErr(err)
		}
		sess.tape = append(sess.tape, target.tokens[off:end]...)
		sess.logitsAt = len(sess.tape)
	}
	reportProgress(ctx, "prefill", len(target.tokens)-from, len(target.tokens)-from)
	return nil
}

// appendTokens decodes toks after the tape: at their tape positions for a
// dense session, through the hot set otherwise.
func (srv *Server) appendTokens(ctx context.Context, sess *session, toks []engine.Token) error {
	if sess.hot != nil {
		return srv.hotAppend(ctx, sess, toks)
	}
	if len(sess.tape)+len(toks) > srv.slot.contextTokens() {
		return protocol.OverflowError{PromptTokens: int64(len(sess.tape) + len(toks)), ContextTokens: int64(srv.slot.contextTokens())}
	}
	if err := srv.slot.ectx.Decode(ctx, toks, len(sess.tape)); err != nil {
		sess.logitsAt = -1
		return engineErr(err)
	}
	sess.tape = append(sess.tape, toks...)
	sess.logitsAt = len(sess.tape)
	return nil
}

// refreshLogits recomputes the tape's last token (in hot-set mode, the
// rest of its block) so the engine holds the logits to sample from.
func (srv *Server) refreshLogits(ctx context.Context, sess *session) error {
	n := len(sess.tape)
	spans := append([]span(nil), sess.spans...)
	var kept int
	if sess.hot != nil {
		var err error
		if kept, err = srv.hotTruncate(sess, n-1); err != nil {
			return err
		}
	} else {
		if _, err := srv.slot.ectx.Remove(n-1, -1); err != nil {
			return engineErr(err)
		}
		kept = n - 1
	}
	// truncate only reslices: the dropped tokens are still in the array.
	redo := append([]engine.Token(nil), sess.tape[kept:n]...)
	sess.tape = sess.tape[:kept]
	sess.spans = spans
	if err := srv.appendTokens(ctx, sess, redo); err != nil {
		sess.spans = clipSpans(spans, len(sess.tape))
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

func (s *session) truncate(n int) {
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
