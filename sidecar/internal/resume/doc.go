// Package resume is the one owner of a session's state leaving the engine
// and coming back: snapshots captured under the engine token and committed
// to the SSD tier (automatic ones too), snapshots restored into a session,
// and cross-session resume, where an empty session whose prompt starts like
// an orphan tape in the arena or a stored snapshot takes that KV instead of
// prefilling it.
//
// It reaches a session only through Session: the tape, read only (Tape:
// tokens, spans, what is approximate), eight methods of the layout
// (Layout: its Capture and Restore, Cut, Clear, the orphan tapes it could
// adopt), the manifest, and two setters that record what a restore
// brought. The daemon's shell (package sidecar) decides when
// and under which lock a session is reached: it hands the owner a Hold that
// runs a function with the session resident under the engine token, and
// wires the snapshot calls to Owner's methods. What it needs of the daemon
// (the loaded model's SSD key, the measured figures, the segment-reuse
// settings) comes in an Env.
//
// Decisions are policy's: policy.PlanResume picks the source (and, past
// the first change, the unchanged segments worth bringing back: a
// snapshot's by its index, an orphan tape's by the spans recorded with
// its blocks),
// policy.PlanRestore what a dense restore reads and what it prefills; the
// layout carries a restore out; package snapshot owns the stored format,
// the index and commits.
//
// Invariants:
//   - Every method that touches a session runs under the engine token with
//     the session resident (inside a Hold, or called by the shell under
//     it); commits, listing, verification and deletion never wait for the
//     engine.
//   - A failed resume leaves the session empty (cleared, or its engine and
//     state reset), so the next sync prefills: never half a source.
//   - A resume keeps exactly the common prefix of the source and the
//     target as exact KV; what it brings back past the first change is
//     approximate, reported so, and never under exact reuse.
//
// Files: owner.go (Owner, Env, Session, Hold), capture.go (capture, saves,
// automatic snapshots), restore.go (a snapshot into a session), resume.go
// (cross-session resume), calls.go (listing, verification, deletion).
package resume
