package sidecar

import (
	"context"
	"errors"
	"fmt"
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
