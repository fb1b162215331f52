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
//     free at that moment (policy.ComputeThreads). A call that chose one
//     thread runs on a second pool of one thread, which has no workers to
//     wake: the computing thread never waits for a sleeping worker to be
//     scheduled (TestOneThreadPoolDecodesAlike).
//   - Ranges and saved sequences hold K rotated for the positions they
//     report: llama.cpp rotates moved cells only at the next llama_decode,
//     so ExtractRange and SaveSeq after a Shift or a moving InsertRange
//     first run that rotation (one token decoded into the scratch
//     sequence and removed).
//
// Attention vectors (engine.QueryCapturer, engine.KeyReader). Every
// context is made with llama.cpp's graph callback (cb_eval), a C function
// that answers "no" at once unless a DecodeCapture is in progress, so a
// plain Decode pays one indirect call per graph node (not measurable: a
// 64-token batch of stories260K or needle.gguf decodes within 1 % of a
// context without the callback). DecodeCapture arms it for the batches
// holding the wanted tokens; per wanted layer it copies the rows of the
// last tensor named "Qcur-<il>" or "Qcur_normed-<il>" that is not a RoPE
// result (the projection, its sum with the bias, a per-head norm as in
// Qwen3) and checks that the RoPE node "Qcur-<il>" reads exactly that
// tensor, so what comes back is what RoPE rotates. A graph that does not
// match (another naming, an unnamed op before RoPE) gives
// ErrInvalidArgument, never wrong vectors. Capturing changes nothing of
// the decode (same KV bytes, same logits).
//
// RangeKeys reads K from a range blob made by ExtractRange (the
// llama_state_seq layout, cells in KV order: rows are put in position
// order; TokenMajor rewrites V only and reads the same) in any K type
// ggml converts to f32 (f16, f32, q8_0, …), and undoes RoPE at each
// cell's stored position with the model's parameters: rope type NORM or
// NEOX (or none), n_rot from rope.dimension_count, freq_base from
// rope.freq_base (llama.cpp's default 10000), freq_scale from
// llama_model_rope_freq_scale_train (linear scaling), and Llama 3's
// per-pair frequency divisors (rope_freqs.weight). The angles are
// computed as ggml's CPU kernel computes them (float32), so keys match
// the graph's pre-RoPE K within the f16 rounding of the cache. YaRN,
// LongRoPE, multi-section or vision RoPE and an attention factor are
// refused with ErrInvalidArgument.
//
// Files: engine.go (Backend and BlobCodec: the package as an
// engine.Backend), cgo.go (cgo flags, llama.cpp's log), backend.go (loading
// GPU backend libraries), choose.go (choosing a device), layout.go (a model
// file's per-layer sizes, read before loading), model.go (Model: loading,
// tokenizing), context.go (Context: decoding, threadpool), kv.go (KV range
// operations on the session sequence), blobfmt.go (the sequence-state blob
// layout and its token-major rewrite), blobkeys.go (the K sections of a
// blob as floats), rope.go (a model's RoPE and its inverse), evalcb.go (the
// graph callback that captures tensors), attention.go (DecodeCapture,
// RangeKeys), capture.go (which buffers llama.cpp allocated where),
// cpuload.go (runnable threads competing for the cores), sampler.go
// (sampler chains).
package llama
