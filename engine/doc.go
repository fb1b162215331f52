// Package engine defines what ctxd needs from an inference engine: a loaded
// model that tokenizes, and contexts that decode token batches at chosen
// positions and move ranges of their KV cache as bytes.
//
// The interfaces carry tensor mechanics only; every decision about what to
// keep, evict or reuse is made in package policy and carried out by the
// sidecar. The llama.cpp adapter lives in engine/llama.
//
// Invariants every implementation keeps:
//   - No call can abort the process: preconditions (sequence ids, position
//     ranges, batch sizes, token ids, capacity) are checked before the
//     engine is touched, and a violation returns an error wrapping
//     ErrInvalidArgument or ErrContextFull.
//   - Sequence 0 is the session's sequence; sequence 1 is scratch and is
//     empty between calls.
//   - A failed or cancelled Decode leaves no part of its batch in the KV.
//   - A Context is used by one goroutine at a time; Cancel is the exception.
//   - Tokenize never maps text to a control token: special-token texts stay
//     text. Only TokenizeSpecial parses them, and the sidecar calls it only
//     on a segment's control spans (a chat template's own markers).
package engine
