package sidecar

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar/internal/layout"
)

// session is one agent conversation: a tape of tokens whose KV is resident
// in the slot's sequence 0 or parked in host memory.
type session struct {
	id     uint64
	name   string
	connID uint64
	busy   sync.Mutex // one call at a time (TryLock → ErrSessionBusy)
	use    usage      // recent engine time, for the scheduler (turns.go; guarded by its lock)

	// Guarded by the slot token.
	tape     layout.Tape      // the tokens, their spans, what the engine holds of them (the layout writes it)
	layout   layout.Layout    // how the tape sits in the engine: dense or a hot set
	manifest *policy.Manifest // from the last EnsurePrefix
	compat   string
	parked   *engine.SeqState
	tokCache map[[32]byte][]engine.Token
	lastUsed time.Time
	closed   bool

	version      uint64 // counts calls that may have changed the tape
	savedVersion uint64 // version at the last snapshot
	lastRestore  *pb.RestoreReport
	lastPrefix   *pb.PrefixReply // the last EnsurePrefix/PrefillSuffix reply, for explain
	ephemeral    bool            // opened "cold": never resumed, never snapshotted automatically

	// explained is what Explain reports, published under the slot token
	// at the end of each call and when a long call yields (view.go).
	explained atomic.Pointer[pb.ExplainReply]
}

func newSession(id uint64, name string, connID uint64) *session {
	return &session{id: id, name: name, connID: connID, tape: layout.NewTape(), tokCache: map[[32]byte][]engine.Token{}, lastUsed: time.Now()}
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

// refreshLogits recomputes the tape's last token (in hot-set mode, the
// rest of its block) so the engine holds the logits to sample from.
func (s *session) refreshLogits(ctx context.Context) error {
	return layout.RefreshLogits(ctx, s.layout, &s.tape)
}
