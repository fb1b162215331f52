package policy

// AutoHotBudget is the hot budget of a daemon given none (ctxd --model
// FILE with no other flag): the whole trained window, so that a prompt
// that fits runs exactly as dense attention would and a longer one streams
// through the hot set instead of failing, bounded by the tokens memory
// holds for the engine's KV (memoryTokens: Capacity.MemoryTokens) less the
// scratch room of two blocks that insertion needs. The daemon's
// turn-latency bound may lower it further once the machine's prefill speed
// is measured. Zero (serve dense) when either bound leaves nothing.
func AutoHotBudget(window, memoryTokens, blockTokens int) int {
	if window <= 0 || memoryTokens <= 0 || blockTokens < 0 {
		return 0
	}
	return max(0, min(window, memoryTokens-2*blockTokens))
}
