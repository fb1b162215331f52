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

// HotExactPrefixEnd is how much of another session's exact prefix, ending
// at end, a hot set copies to the same positions for a prompt of total
// tokens (limit: the hot set's; batch: the engine's prefill batch; chunk:
// the room a prefill makes at once, HotLimits.ChunkTokens). A hot set's
// KV depends on when blocks were evicted while it streamed in, so the
// tokens prefilled after the prefix must see the evictions a cold prefill
// makes: all of the prefix when the prompt fits the hot set (nothing is
// evicted either way), or when streaming on from end first evicts where a
// cold prefill first does; else up to the last point before that where a
// cold prefill's stream stands between two batches. The rest is the
// donor's common prefix, copied approximately.
func HotExactPrefixEnd(end, total, limit, batch, chunk int) int {
	if total <= limit || end <= 0 {
		return max(end, 0)
	}
	batch, chunk = max(batch, 1), max(chunk, 1)
	cold := firstEviction(0, total, limit, batch, chunk)
	if end <= cold && firstEviction(end, total, limit, batch, chunk) == cold {
		return end
	}
	best := 0
	for p := 0; p <= min(end, cold); {
		best = p
		if p == cold {
			break
		}
		p += min(total-p, limit-p, batch)
	}
	return best
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
