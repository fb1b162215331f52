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
