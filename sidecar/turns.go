package sidecar

import (
	"context"
	"sync"
	"time"

	"github.com/ctxd/ctxd/policy"
)

// turns is the right to use the engine, handed out first come, first
// served. A call holds it for a turn; a long call (a decode, a large
// prefill) gives it up between steps when others wait (Server.yield), so
// the sessions' turns interleave instead of one call holding the engine
// for minutes. Readers of published state (status, metrics, snapshot
// listing, explain) never take it.
type turns struct {
	mu      sync.Mutex
	held    bool
	since   time.Time       // when the current holder got it
	waiters []chan struct{} // FIFO; closed to hand the engine over
}

// acquire waits for the engine in arrival order, or gives up when ctx ends.
func (t *turns) acquire(ctx context.Context) error {
	t.mu.Lock()
	if !t.held && len(t.waiters) == 0 {
		t.held, t.since = true, time.Now()
		t.mu.Unlock()
		return nil
	}
	w := make(chan struct{})
	t.waiters = append(t.waiters, w)
	t.mu.Unlock()
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		t.mu.Lock()
		for i, x := range t.waiters {
			if x == w {
				t.waiters = append(t.waiters[:i], t.waiters[i+1:]...)
				t.mu.Unlock()
				return ctx.Err()
			}
		}
		t.mu.Unlock()
		// Handed over just as ctx ended: pass it on.
		t.release()
		return ctx.Err()
	}
}

// tryAcquire takes the engine only if it is free and nobody waits.
func (t *turns) tryAcquire() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held || len(t.waiters) > 0 {
		return false
	}
	t.held, t.since = true, time.Now()
	return true
}

// release hands the engine to the longest waiter, or frees it.
func (t *turns) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.waiters) == 0 {
		t.held = false
		return
	}
	w := t.waiters[0]
	t.waiters = t.waiters[1:]
	t.since = time.Now()
	close(w)
}

// contended reports whether someone waits for the engine, and how long
// the holder has had it.
func (t *turns) contended() (bool, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.waiters) > 0, time.Since(t.since)
}

// busy reports whether the engine is held.
func (t *turns) busy() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.held
}

// yield lets waiting calls have the engine when sess's call has held it
// for its quantum (policy.EngineQuantum of the measured switch cost), then
// waits for its next turn and makes sess resident again. It publishes
// sess's state first, so Explain and snapshots taken meanwhile see the
// call's progress. The caller holds the token, sess is resident and its
// tape and KV agree; when yield returns the same holds, but the engine
// may have lost sess's last logits (logitsAt is then -1).
func (srv *Server) yield(sess *session) error {
	waiting, held := srv.slot.token.contended()
	if !waiting || held < policy.EngineQuantum(srv.slot.switchCost) {
		return nil
	}
	srv.publishSession(sess)
	srv.slot.release()
	// The call already holds sess.busy, so its turn always comes back;
	// it does not give up on cancellation (the caller checks ctx next).
	_ = srv.slot.acquire(context.Background())
	sess.version++ // a snapshot may have been captured meanwhile
	return srv.slot.makeResident(sess)
}
