// Package tiers owns the daemon's KV copies below the engine: the host-RAM
// arena of the loaded model (package shm), the SSD tier of the server
// (package coldstore), the orphan tapes the arena holds, and the tracing
// of every fetch (through an Observer the daemon supplies).
//
// The hot set parks, fetches, spills and drops blocks through a Tiers and
// never reaches shm or coldstore itself. When the SSD tier cannot be
// opened, or later stands aside after ENOSPC/EIO, sessions keep running
// on host RAM and Status says why.
//
// Invariants:
//   - Every call that may wait for the SSD takes the caller's context.
//   - A read that fails or is cancelled changes nothing: the copy stays
//     where it was, so the block stays retrievable.
//   - A block spilled to the SSD tier is pinned there (spared by the
//     quota's collection) until its owner drops it.
//   - A full arena frees orphan tapes, oldest first, before Park gives up
//     and lets the caller choose a victim to spill.
//   - A spans record is used only when it decodes and names a block of
//     its tape (its end and chain hash); any other is freed at load, and
//     a record never costs a parked block (a full arena skips it).
//   - A closed session's open tail is used only when it follows its
//     tape's last block (its chain hash) and the tape's spans record
//     names it; it is never part of the tape's tokens (the prefix a
//     resume weighs), and it goes with its tape (freed, taken).
//   - Every SSD-tier blob is an envelope of parts (blob.go); the
//     envelope is the only record of how its bytes were laid out for
//     compression, and DecodeBlob returns the engine's bytes exactly.
//     EnvelopeVersion is part of every key, so blobs of another layout
//     never match.
//   - Equal ContentKeys mean equal bytes: a key covers the model, the KV
//     settings, the token chain, the position and the bytes themselves.
//
// Files: tiers.go (Tiers: open, attach, park, fetch, spill, drop),
// blob.go (the SSD blob envelope, content keys, compat, error mapping),
// orphan.go (orphan tapes), orphanspans.go (the segment spans recorded
// with a session's parked blocks, one arena record per session, checked
// against the tape at load), orphantail.go (a closed session's open tail,
// parked beside its orphan tape), observer.go (fetch phases and the
// Observer).
package tiers
