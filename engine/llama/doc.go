// Package llama is ctxd's own cgo binding to llama.cpp's public llama.h,
// implementing engine.Backend (Backend, the value cmd/ctxd configures the
// daemon with), engine.Model and engine.Context.
//
// llama.cpp itself is compiled by github.com/ollama/ollama/llama, imported
// only so that it is linked in; the include paths for llama.h and ggml.h
// come from CGO_CPPFLAGS computed by the Makefile.
//
// Invariants:
//   - Contexts are created with n_seq_max = 2 and kv_unified = true, so
//     partial sequence copies are legal; sequence 1 is scratch and is empty
//     between calls.
//   - Every argument is validated in Go against the context's own record of
//     occupied positions (engine.PosSet) before llama.cpp is called, so no
//     GGML_ASSERT is reachable from a caller.
//   - A Context is driven by one goroutine at a time; only the abort flag
//     set by a cancelled context.Context is touched concurrently, through
//     C atomics.
//   - Native memory (model, context, batch, samplers, abort flag, ggml
//     threadpool) is freed by Close; a finalizer is not relied upon.
//   - GPU backends are shared libraries registered once per folder by
//     LoadBackends (the CPU backend is linked in); a model goes to a device
//     only when LoadWith names it, and Facts().Placement reports what
//     llama.cpp's buffer reports say was allocated there, never what was
//     asked for. The KV cache follows its layers (offload_kqv).
//   - A load (LoadContext) is abandoned when its context ends: while the
//     file is hashed, and at llama.cpp's next progress report (its
//     progress callback returns false); nothing of the model is kept.
//   - Each context owns a ggml threadpool with poll 0 (idle workers sleep)
//     and sets its thread count before every llama_decode from the cores
//     free at that moment (policy.ComputeThreads).
//
// Files: engine.go (Backend and BlobCodec: the package as an
// engine.Backend), cgo.go (cgo flags, llama.cpp's log), backend.go (loading GPU
// backend libraries), choose.go (choosing a device), layout.go (a model
// file's per-layer sizes, read before loading), model.go (Model: loading,
// tokenizing), context.go (Context: decoding, threadpool), kv.go (KV range
// operations on the session sequence), blobfmt.go (the sequence-state blob
// layout and its token-major rewrite), capture.go (which buffers llama.cpp
// allocated where), cpuload.go (runnable threads competing for the cores),
// sampler.go (sampler chains).
package llama
