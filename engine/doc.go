// Package engine defines what ctxd needs from an inference engine, and is
// the daemon's only door to one: a Backend that plans placement (Placer),
// loads models (Loader), describes its build and knows the layout of its
// state blobs (BlobCodec); a loaded Model that tokenizes; and Contexts that
// decode token batches at chosen positions and move ranges of their KV
// cache as bytes.
//
// The interfaces carry tensor mechanics only; every decision about what to
// keep, evict or reuse is made in package policy and carried out by the
// sidecar, which is handed a Backend in its configuration and imports no
// implementation. engine/llama is the llama.cpp (cgo) implementation;
// engine/enginefake is a pure-Go one for the daemon's unit tests. Optional
// capabilities (attention.go) are interfaces a Context may also implement,
// found with a type assertion.
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
//   - A blob is only put back into a context like the one that made it;
//     BlobCodec's rewrites are exact (FromTokenMajor(TokenMajor(b)) == b).
//   - Blocking calls take a context: Decode between batches, Load while
//     the file is read and between the engine's progress reports.
//
// Files: backend.go (Backend, Placer, Loader, BlobCodec, ChooseDevice),
// engine.go (Model, Context, Sampler, Facts, sentinel errors), options.go
// (ContextOptions.Resolve: the context defaults and their validation, for
// every engine), check.go (the KV methods' argument checks, MaxPos, for
// every engine), device.go
// (devices, placement, a model file's layout), attention.go (optional
// QueryCapturer and KeyReader), posset.go (PosSet, the occupied positions
// adapters validate against).
package engine
