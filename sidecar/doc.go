// Package sidecar is the ctxd daemon: it owns the single model slot and the
// sessions' resident KV state, serves the wire protocol of PROTOCOL.md on a
// Unix socket, and carries out what package policy decides through package
// engine.
//
// The engine is reached only through the engine.Backend of Config.Engine
// (engine/llama's in ctxd): the package imports no engine implementation
// and no cgo package (TestEngineIsTheOnlyDoor). Its unit tests run on
// engine/enginefake through Server.Handle in seconds (fake_*_test.go;
// `go test ./sidecar -run Fake`, make test-fake); the other tests are
// integration tests on real models over the socket.
//
// Invariants:
//   - One owner: a Server holds an exclusive lock on its data directory for
//     its whole life; a second Server on the same directory refuses to
//     start, and an owner whose lock file is removed or replaced fences
//     itself (stops serving) rather than share state.
//   - One model slot: loading, switching or unloading a model while any
//     session is open fails with ErrModelBusy. Where the model runs (CPU,
//     or layers on a GPU device) is planned before loading (device.go);
//     KV stored by the slot carries the backend in its compatibility keys.
//   - One engine user at a time: every engine call runs under the slot's
//     token (turns.go), handed out in arrival order. A long decode or
//     prefill gives it up between tokens or batches once it has held it for
//     the quantum policy.EngineQuantum derives from the measured cost of a
//     session switch, so sessions interleave fairly; it does so only with
//     its tape and KV equal. Status, Explain, ListSnapshots, Metrics and
//     Summary never take the token: they read views published under it
//     (view.go).
//   - Private folders (the socket's, the arena's, the SSD tier's) are never
//     reached through a symbolic link nor taken over from another uid
//     (internal/privdir); only a stale socket is ever unlinked.
//   - One owner per piece of state. The Server owns connections and
//     sessions; the slot (slot.go) the model and the engine; tiers
//     (package tiers) every KV copy below the engine: the host-RAM arena, the
//     SSD tier and the orphan tapes, with fetch tracing; snapshots and
//     resume (package resume, which reaches a session only through
//     resume.Session; package snapshot below it: the format, the index and
//     commits); each session's
//     layout (package layout) how its tape sits in the engine. Nothing else
//     reaches shm or coldstore's blocks: the hot set parks, fetches,
//     spills and drops through tiers.
//   - A session's tape mirrors its KV exactly, and its layout keeps it so.
//     Dense: token i of the tape sits at position i of sequence 0
//     whenever the session is resident. Hot set: the
//     tape is cut into blocks, each either in the engine at a recorded
//     position below the window or parked below it, and the engine's
//     ranges tile [0, end) of sequence 0. A "v" coordinate (vstart,
//     tailV) is a tape index, a "p" coordinate (pstart, tailP, pos0) an
//     engine position. Every failure (bad input, cancellation, a vanished
//     client, an unreadable tier) leaves the tape and the KV equal to each
//     other.
//   - A block's residency is one value (in the engine or not; a copy in
//     the arena, the SSD tier, or none). A failed or cancelled SSD read
//     never forgets the copy: the block stays retrievable. Every blocking
//     tier call takes the turn's context.
//   - Only peers with the server's uid (or a configured allow list) talk to
//     it.
//   - A snapshot is reported committed only after its blocks and its file
//     are durably in the SSD tier (package snapshot); capture holds the engine
//     token for memory copies only, and the token-major rewrite, hashing
//     and compression run in commit after it is released. How a blob's
//     bytes were laid out is recorded once, in its envelope (tiers).
//     A restore reproduces the saved engine state byte for byte, and both
//     the saved and the restored session recompute the last token's
//     logits, so they continue alike.
//   - KV bytes are only reused where their key says they are equal: SSD
//     blocks are addressed by model, KV settings, token chain, position and
//     content; arena blocks adopted from closed sessions or an earlier run
//     (orphan.go) are matched by their tokens and checked by their hash
//     chain before use.
//   - The SSD tier is optional: when it cannot be opened or stands aside
//     (disk full, I/O errors) sessions keep running on host RAM and Status,
//     Explain and the logs say why.
//
// Packages and files, by owner (inner packages never import this one;
// internal/layering checks the import rules):
//
//	shell      server.go (Server: start-up, listening, shutdown), config.go
//	           (Config and its validation), conn.go (one client connection),
//	           stream.go (a call's DATA frames: coalescing fast tokens),
//	           handler.go (the calls and their streamed events), calls.go
//	           (the session calls: open, ensure_prefix, prefill_suffix,
//	           decode, close), invalidate.go (invalidation hints),
//	           explain.go (ExplainContext), view.go (published views read
//	           without the engine), summary.go, metrics.go (the Prometheus
//	           registry; the inner packages' Observer and Counters),
//	           trace.go (the fetch-phase markers ctxtrace probes),
//	           progress.go, inprocess.go and private.go (a daemon served
//	           inside another program), owner.go (the single-owner lease)
//	slot       slot.go (the model slot), turns.go (the engine token, handed
//	           out fairly), device.go (where a model is loaded), memory.go
//	           (MemAvailable), figures.go (throughputs measured at load)
//	session    session.go (a session: its layout.Tape and layout.Layout),
//	           layouts.go (a new session's layout, its Env, the segment-reuse settings),
//	           donors.go (the live sessions a prompt may copy KV from; copying a
//	           dense one's parked KV under the slot), orphandonors.go (the
//	           orphan tapes it may copy segments from; the key a session's
//	           parked blocks are recorded under), tokenize.go
//	           (segments to tokens), text.go (generated text as valid UTF-8),
//	           retrieval.go (SetScorers), attention.go (which engines run
//	           the attention scorer)
//	layout     package sidecar/internal/layout: the tape, the dense layout
//	           and the hot set (residency, sealing, eviction, admission,
//	           retrieval and its attention scorer, adoption, snapshot
//	           capture and restore of each layout)
//	tiers      package sidecar/internal/tiers: arena, SSD tier, orphan
//	           tapes, the SSD blob envelope
//	snapshots  package sidecar/internal/resume: the one owner of capture,
//	           restore, automatic snapshots and cross-session resume,
//	           reaching a session through resume.Session only; package
//	           sidecar/internal/snapshot: the format, Capture, the Store
//	           (index, commit, load, prune, automatic commits);
//	           snapshots.go wires the snapshot calls, automatic and idle
//	           snapshots and resume to it (which session, under which lock)
package sidecar
