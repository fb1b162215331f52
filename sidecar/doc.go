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
//   - A session's tape mirrors its KV exactly. Dense sessions: token i of
//     the tape sits at position i of sequence 0 whenever the session is
//     resident. Hot-set sessions (hot.go): the tape is cut into blocks, each
//     either hot at a recorded position below the window or parked in the
//     arena, and the hot ranges tile [0, end) of sequence 0. Every failure
//     (bad input, cancellation, a vanished client) leaves the tape and the
//     KV equal to each other.
//   - Only peers with the server's uid (or a configured allow list) talk to
//     it.
//   - A snapshot is reported committed only after its blocks and its file
//     are durably in the SSD tier (snapshot.go); a restore reproduces the
//     saved engine state byte for byte, and both the saved and the restored
//     session recompute the last token's logits, so they continue alike.
//   - KV bytes are only reused where their key says they are equal: SSD
//     blocks are addressed by model, KV settings, token chain, position and
//     content; arena blocks adopted from closed sessions or an earlier run
//     (orphan.go) are matched by their tokens and checked by their hash
//     chain before use.
//   - The SSD tier is optional: when it cannot be opened or stands aside
//     (disk full, I/O errors) sessions keep running on host RAM and Status,
//     Explain and the logs say why.
//
// Files: server.go (Server: start-up, listening, shutdown), config.go
// (Config and its validation), conn.go (one client connection), handler.go
// (the calls and their streamed events), inprocess.go and private.go (a
// daemon served inside another program), owner.go (the single-owner lease),
// slot.go (the model slot), turns.go (the engine token, handed out fairly),
// device.go (where a model is loaded), memory.go (MemAvailable), figures.go
// (throughputs measured at load), session.go (a session's tape and segment
// spans), sessions.go (opening, parking and closing sessions), invalidate.go
// (invalidation hints), hot.go (hot-set mode), retrieval.go (retrieval
// candidates for explain), attention.go (the attention scorer: key
// summaries, the query probe, fusion), orphan.go (adopting parked blocks of gone
// sessions), cold.go (the SSD tier), snapshot.go (snapshots: format,
// capture, restore, resume, automatic snapshots), explain.go
// (ExplainContext), view.go (published views read without the engine),
// summary.go (a glance for service managers), metrics.go (the Prometheus
// registry), progress.go (progress of long calls), trace.go (marker
// functions ctxtrace probes).
package sidecar
