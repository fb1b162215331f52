// Package policy holds ctxd's pure decisions: how many tokens of KV cache fit
// in memory (capacity), how a prompt is described as ordered segments (the
// manifest) and where its reusable stable prefix ends (the reuse boundary),
// what an edit or a new turn invalidates, and, for contexts longer than the
// model's window, the hot set: its limits (ResolveHotLimits), which KV
// blocks are hot in the engine for a turn and at which positions
// (PlanHotSet, LatencyHotBudget), which are evicted while a prompt streams
// in (PlanEviction) or spilled from a full arena (SpillVictim), how a
// sealed block is kept (ClassifyBlock), given how relevant each block is to
// the turn (Scorer, BM25Index, asked with what the turn brings: TurnQuery,
// TurnRecentTokens; AttentionIndex over key summaries sized by
// PlanKeySummary, asked with the turn's attention queries; FuseScores
// combining both; which scorers run: ScorerSet); where a new session
// resumes from (ChooseResume, PlanAdoption), which unchanged segments past
// an early change keep their KV, moved, and how much of them is recomputed
// (MatchSegments, PlanSegmentReuse), which live session a one-shot HTTP
// request runs on (ChooseSession, EvictSession) and whether a snapshot's blocks
// are read back or recomputed (PlanRestore); and where a model runs: which
// device (ChooseDevice), how many layers fit its free memory with the
// compute buffers and the hot-set KV (PlanOffload), and how many CPU
// threads a decode call may use beside other processes (ComputeThreads).
//
// Invariants, which every file in this package keeps:
//
//   - No cgo and no I/O: nothing here reads files, the clock, the network or
//     the environment, and nothing starts goroutines.
//   - Deterministic: the same inputs always give the same outputs, including
//     digests and human-readable messages.
//   - Inputs are plain values measured by callers (free memory, model
//     dimensions, file paths); policy only decides.
//   - Failures are reported with sentinel errors usable with errors.Is.
//
// Only the standard library is used.
//
// Files: capacity.go (how many tokens fit), autohot.go (the default hot
// budget), latency.go (the prefill cost model behind --turn-latency),
// turns.go (the engine quantum: how long a call keeps the engine before it
// yields), device.go and offload.go (device choice and layer offload),
// kvtype.go (KV element types and their sizes), manifest.go (manifests and
// their validation), kind.go (segment kinds and cache classes), control.go
// (control-token spans), digest.go (canonical digests and compatibility
// keys), invalidate.go (which edits invalidate a segment), hotlimits.go
// (hot-set limits: defaults, validation, the minimum budget), hotset.go
// (planning the hot set, and the unpin fallback), evict.go (eviction order,
// the victims a prefill chunk needs, spill order on a full arena),
// blockclass.go (a sealed block's class), adopt.go (which blocks a resumed
// orphan tape brings back), restore.go (restore or recompute: the cost
// model), resume.go (which source a new session resumes from),
// segreuse.go (segment reuse past an early change: matching, the plan and
// its recompute budget), donorreuse.go (reuse from other live sessions:
// their exact prefix, their equal segments, whether a copy pays),
// sessiontokens.go (the most tokens a hot-set session holds, from the
// arena's record sizes), sessionchoice.go (which live session an adapter's
// one-shot request runs on, and which idle one is closed when the table
// is full), query.go (the turn's
// retrieval query), bm25.go (the lexical index), keysummary.go (a block's
// key summary: its size and its kept keys), attention.go (the attention
// index), fusion.go (combining scorers), vectors.go (per-head vectors from
// the engine), retrieval.go (block scores), scorers.go (scorer names), errors.go (sentinel errors), format.go
// (byte sizes in messages), stream.go (when a streamed token's frame waits
// to share the next write).
package policy
