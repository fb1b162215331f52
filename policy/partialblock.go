package policy

// A hot set parks its KV in whole blocks; a moved or copied run, a cut or
// an exact prefix often wants only part of one. The block's KV then comes
// back whole (read from the arena or the SSD tier, inserted) and the
// unwanted tokens are removed and the rest shifted into place; or its
// wanted tokens are prefilled again. PartialBlockWorthCopying weighs the
// two with the measured figures.

// PartialBlockWorthCopying reports whether bringing a block of
// blockTokens back to keep want of its tokens beats prefilling those
// want tokens: copySecondsPerToken × blockTokens (the whole block is read
// and inserted) against perTokenSeconds × want (the measured prefill cost
// model). Unknown figures (zero) do not stop a copy: reading a block is a
// memory copy, prefilling runs the model.
func PartialBlockWorthCopying(want, blockTokens int, perTokenSeconds, copySecondsPerToken float64) bool {
	if want <= 0 || blockTokens < want {
		return false
	}
	if perTokenSeconds <= 0 || copySecondsPerToken <= 0 {
		return true
	}
	return float64(want)*perTokenSeconds > float64(blockTokens)*copySecondsPerToken
}

// HotExactPrefix is how much of another session's exact prefix, ending
// at end, a hot set copies to the same positions for a prompt of total
// tokens (limit: the hot set's; batch: the engine's prefill batch; chunk:
// the room a prefill makes at once, HotLimits.ChunkTokens), and where the
// prefill after it first stops. A hot set's KV depends on when blocks were
// evicted while it streamed in, so the tokens prefilled after the prefix
// must see the evictions a cold prefill makes: the prefix goes up to a
// cold prefill's first eviction at most (all of it when the prompt fits
// the hot set: nothing is evicted either way), and the prefill after it
// first runs to the next point where a cold prefill's stream stands
// between two batches (stop; take itself when it is one), from where it
// streams on as a cold prefill does. What the prefix leaves is the
// donor's common prefix, copied approximately.
func HotExactPrefix(end, total, limit, batch, chunk int) (take, stop int) {
	if end <= 0 {
		return 0, 0
	}
	if total <= limit {
		return end, end
	}
	batch, chunk = max(batch, 1), max(chunk, 1)
	take = min(end, firstEviction(0, total, limit, batch, chunk))
	for p := 0; ; p += min(total-p, limit-p, batch) {
		if p >= take {
			return take, p
		}
	}
}

// firstEviction is where a hot set holding the stream's first from tokens
// at their positions, nothing evicted, first evicts while it prefills up
// to total, as its prefill loop runs (layout.hotSet.AppendTokens: room
// for min(rest, chunk) tokens, else evict; then decode min(rest, room,
// batch)); total when it never does.
func firstEviction(from, total, limit, batch, chunk int) int {
	for end := from; end < total; {
		if limit-end < min(total-end, chunk) {
			return end
		}
		end += min(total-end, limit-end, batch)
	}
	return total
}
