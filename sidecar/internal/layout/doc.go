// Package layout is how a session's tape sits in the engine: the Tape
// itself (tokens, segment spans, what the engine holds of them) and its
// Layout, dense or a hot set, chosen once when the session opens.
//
// Dense: token i of the tape sits at position i of sequence 0; the tape
// is as long as the engine's context and no longer.
//
// Hot set: the tape is cut into blocks (the first SinkTokens tokens, then
// BlockTokens each) and every sealed block's KV is parked below the engine
// (package tiers). The engine holds a bounded hot set laid out
// [sinks][pinned][retrieved][recent][new tokens] at positions that stay
// below the trained window. While a long prompt streams in, the least
// useful hot blocks are evicted and the rest shifted down; at each turn
// the parked blocks are scored against the new tokens and the best are
// brought back in bulk. Package policy makes every decision (limits,
// eviction, the plan, adoption, restore or recompute); this package
// carries them out.
//
// Positions: a "v" coordinate (vstart, tailV) is a tape index, the token's
// place in the session's stream; a "p" coordinate (pstart, tailP, pos0) is
// an engine position. Dense sessions have v = p; a hot set moves blocks,
// so a block's p changes while its v never does.
//
// Invariants (Check verifies them; the daemon's tests call it):
//   - The tape and the KV are equal after every method, on failure too
//     (bad input, cancellation, an unreadable tier).
//   - Hot set: blocks partition tape[:tailV] in order; the tail holds
//     tape[tailV:] at positions [tailP, physEnd); hot blocks and the tail
//     occupy disjoint ranges that tile [0, physEnd) exactly, physEnd <=
//     the limit.
//   - A block's residency is one value: in the engine or not, with a copy
//     in the arena, in the SSD tier, or none. A failed or cancelled SSD
//     read never forgets the copy; only bytes the engine refuses, or an
//     arena that lost them, make a block lost.
//   - Layouts reach the arena and the SSD tier only through package
//     tiers, and every blocking call takes the turn's context.
//   - Nothing here imports the daemon (package sidecar): what a layout
//     needs of it comes in an Env.
//
// Files: layout.go (Layout, Env), tape.go (Tape: private to the layout,
// with the few methods the daemon needs; spans, prompts), dense.go,
// segreuse.go (a dense session's reuse past an early change: unchanged
// segments' KV moved into place), donor.go (copying KV from other live
// sessions: Donor), hotdonor.go (a hot set as a donor: its sealed
// blocks token by token, its open tail, its exact prefix), kvpart.go
// (parts of blocks: a block's KV read back whole and trimmed), hotset.go
// (the hot set: Sync, Cut, lifecycle), hotblock.go (a block and its
// residency), hotturn.go (the layout at a turn's start, restored by a cut
// back to it), hotconfig.go,
// hotseal.go (streaming in: sealing, parking, spilling), hotevict.go
// (eviction and compaction), hotplan.go (a turn's retrieval carried out),
// retrieval.go (retrieval reports for explain), attention.go (the
// attention scorer: key summaries, the query probe, fusion), adopt.go
// (orphan tapes kept, with the open tail, and adopted), orphanspans.go
// (segment spans recorded with parked blocks), orphandonor.go (orphan tapes as donors), capture.go
// and restore.go (snapshots),
// explain.go, check.go (the invariants).
package layout
