// Package snapshot owns the daemon's snapshots: a session written to the
// SSD tier (coldstore.Snapshot) with its manifest, the ordered list of its
// KV blobs (content-addressed, so blobs shared with earlier snapshots are
// written once) and Meta, JSON that rebuilds the session exactly: the
// token tape, the segment spans and, for hot-set sessions, every block's
// place plus an image of what the engine held.
//
// Snapshots are taken in two steps: package resume captures a session
// under its engine token into a Capture, with memory copies only; Commit
// then hashes, rewrites for compression (tiers.EncodeBlob), writes and
// commits, without the token. Restore and resume are package resume's
// too (they need the engine and a session); they read snapshots through
// Load and the index, which keeps each snapshot's tape and segment ranges
// for resume matching.
//
// Invariants:
//   - A snapshot is reported committed only after its blobs and its file
//     are durably in the SSD tier; only then does it enter the index.
//   - How a blob's bytes were laid out is recorded once, in the blob's
//     envelope; Meta only says where a block's engine bytes sit (offset
//     and length in its blob's engine bytes).
//   - Meta is versioned (Format); a snapshot of another format or another
//     model's compat is refused with ErrIncompatible, never half-used.
//   - The Store's methods never wait for the engine.
//
// Files: format.go (Meta and the tape encoding), capture.go (Capture),
// store.go (Store: the index, commit, load, delete, pruning, automatic
// commits in the background).
package snapshot
