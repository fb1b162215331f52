package policy

import "time"

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
