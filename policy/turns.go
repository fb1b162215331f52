package policy

import (
	"math"
	"time"
)

// MaxSwitchShare is the largest share of the engine's time that switching
// between sessions may take while calls wait for it: a switch parks the
// resident session's KV and restores the next one's, so a call that yields
// too often spends the engine on moving KV instead of computing.
const MaxSwitchShare = 0.2

// EngineQuantum is how long a call keeps the engine while other calls wait
// before it yields to them, given the measured cost of one switch between
// sessions: switchCost × (1 − MaxSwitchShare) / MaxSwitchShare, so that
// switches take at most MaxSwitchShare of the engine's time. A smaller
// quantum would let waiting calls in sooner but spend more on switching; a
// larger one makes them wait longer behind a long decode or prefill. A zero
// or negative cost (nothing measured yet, or a free switch) gives 0: yield
// at the next step.
func EngineQuantum(switchCost time.Duration) time.Duration {
	if switchCost <= 0 {
		return 0
	}
	return time.Duration(float64(switchCost) * (1 - MaxSwitchShare) / MaxSwitchShare)
}

// UsageHalfLife is how fast a session's recent use of the engine is
// forgotten: the scheduler orders sessions by their use over the last few
// such spans, so a session that waited long enough is owed the engine.
const UsageHalfLife = 5 * time.Second

// DecayedUsage is a session's recent engine time: use measured at a time
// since ago, halved every UsageHalfLife.
func DecayedUsage(use time.Duration, since time.Duration) time.Duration {
	if use <= 0 || since <= 0 {
		return max(use, 0)
	}
	return time.Duration(float64(use) * math.Exp2(-float64(since)/float64(UsageHalfLife)))
}

// ShouldYield decides, between two steps of a call, whether it gives the
// engine to the waiting call that has used the engine least recently.
// holderUse is the holding session's recent use including this hold,
// waiterUse the waiter's; held is how long the call has held the engine
// and quantum EngineQuantum. Scheduling is by wall-clock time, not by
// steps: a waiter that has used less than half the holder's time takes
// the engine at the next step (a short turn beside a long prefill or
// decode waits for one step, not for a quantum of the long call), a
// waiter owed at least as much time as the holder takes it after a
// quantum, and a waiter that has used more does not take it from a
// holder that has used less (a short turn is not interrupted by the long
// one it preempted).
func ShouldYield(held, quantum, holderUse, waiterUse time.Duration) bool {
	switch {
	case 2*waiterUse < holderUse:
		return true
	case waiterUse <= holderUse:
		return held >= quantum
	}
	return false
}
