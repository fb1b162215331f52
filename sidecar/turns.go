package sidecar

import (
	"context"
	"sync"
	"time"

	"github.com/ctxd/ctxd/policy"
)

// turns is the right to use the engine. A call holds it for a turn; a
// long call (a decode, a large prefill) gives it up between steps when
// another waits and is owed the engine (Server.yield, policy.ShouldYield),
// so the sessions' turns interleave by wall-clock time instead of one call
// holding the engine for minutes. Waiters are served least recent engine
// use first (a session's use decays with policy.UsageHalfLife; calls of no
// session count as none), arrival order among equals. Readers of
// published state (status, metrics, snapshot listing, explain) never take
// it.
type turns struct {
	mu      sync.Mutex
	held    bool
	since   time.Time // when the current holder got it
	holder  *usage    // the holder's session's use; nil for other calls
	waiters []waiter  // in arrival order
}

// waiter is a call waiting for the engine.
type waiter struct {
	ch chan struct{} // closed to hand the engine over
	u  *usage
}

// usage is a session's recent engine time; guarded by turns.mu.
type usage struct {
	use time.Duration
	at  time.Time
}

// now is the use at t.
func (u *usage) now(t time.Time) time.Duration {
	if u == nil {
		return 0
	}
	return policy.DecayedUsage(u.use, t.Sub(u.at))
}

func (u *usage) add(d time.Duration, t time.Time) {
	if u != nil {
		u.use, u.at = u.now(t)+d, t
	}
}

// acquire waits for the engine for a call of no session.
func (t *turns) acquire(ctx context.Context) error { return t.acquireAs(ctx, nil) }

// acquireAs waits for the engine for a call of the session whose use is u,
// or gives up when ctx ends.
func (t *turns) acquireAs(ctx context.Context, u *usage) error {
	t.mu.Lock()
	if !t.held && len(t.waiters) == 0 {
		t.held, t.since, t.holder = true, time.Now(), u
		t.mu.Unlock()
		return nil
	}
	w := make(chan struct{})
	t.waiters = append(t.waiters, waiter{ch: w, u: u})
	t.mu.Unlock()
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		t.mu.Lock()
		for i, x := range t.waiters {
			if x.ch == w {
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
	t.held, t.since, t.holder = true, time.Now(), nil
	return true
}

// next is the index of the waiter with the least recent use (the
// earliest among equals); the caller holds mu and there is a waiter.
func (t *turns) next(now time.Time) int {
	best := 0
	for i := 1; i < len(t.waiters); i++ {
		if t.waiters[i].u.now(now) < t.waiters[best].u.now(now) {
			best = i
		}
	}
	return best
}

// release charges the holder's session for its hold and hands the engine
// to the waiter owed it most, or frees it.
func (t *turns) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	t.holder.add(now.Sub(t.since), now)
	if len(t.waiters) == 0 {
		t.held, t.holder = false, nil
		return
	}
	i := t.next(now)
	w := t.waiters[i]
	t.waiters = append(t.waiters[:i], t.waiters[i+1:]...)
	t.since, t.holder = now, w.u
	close(w.ch)
}

// contended reports whether someone waits for the engine, and how long
// the holder has had it.
func (t *turns) contended() (bool, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.waiters) > 0, time.Since(t.since)
}

// owed reports whether a waiter is owed the engine now, by
// policy.ShouldYield, given the engine quantum.
func (t *turns) owed(quantum time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.waiters) == 0 {
		return false
	}
	now := time.Now()
	held := now.Sub(t.since)
	return policy.ShouldYield(held, quantum, t.holder.now(now)+held, t.waiters[t.next(now)].u.now(now))
}

// busy reports whether the engine is held.
func (t *turns) busy() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.held
}

// yield lets a waiting call have the engine when it is owed it
// (turns.owed: by recent engine time, with policy.EngineQuantum of the
// measured switch cost between peers), then
// waits for its next turn and makes sess resident again. It publishes
// sess's state first, so Explain and snapshots taken meanwhile see the
// call's progress. The caller holds the token, sess is resident and its
// tape and KV agree; when yield returns the same holds, but the engine
// may have lost sess's last logits (logitsAt is then -1).
func (srv *Server) yield(sess *session) error {
	if !srv.slot.token.owed(policy.EngineQuantum(srv.slot.switchCost)) {
		return nil
	}
	srv.publishSession(sess)
	srv.slot.release()
	// The call already holds sess.busy, so its turn always comes back;
	// it does not give up on cancellation (the caller checks ctx next).
	_ = srv.slot.acquireAs(context.Background(), &sess.use)
	sess.version++ // a snapshot may have been captured meanwhile
	return srv.slot.makeResident(sess)
}
