package tiers

import (
	"log/slog"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/shm"
)

// Orphan tapes: parked blocks whose session is gone — closed in this run,
// or left in the arena by a previous ctxd (a crash loses no parked block:
// the arena is re-attached and verified at load). Each orphan tape is the
// longest prefix of a session's blocks whose hash chain is unbroken, so its
// tokens are known exactly. A new hot-set session whose prompt starts with
// an orphan tape's tokens adopts its blocks instead of prefilling them
// (matched by tokens, checked by the chain), then brings back its sinks,
// pinned blocks and recent window. A full arena frees orphans, oldest
// first, before it evicts a live session's blocks.

// OrphanTape is a chain-verified run of parked blocks without a session.
type OrphanTape struct {
	Blocks []shm.Meta
	Tokens []engine.Token // the blocks' tokens, in order
	Since  time.Time
	// Session is the session whose blocks end the tape (the one that
	// closed; its spans record describes the tape).
	Session uint64
	// Spans are the tape's segment spans when they were recorded with its
	// blocks (orphanspans.go), whole segments within Tokens; nil: the tape
	// lends no segments, only its prefix. Compat is the compatibility key
	// they were built under.
	Spans  []OrphanSpan
	Compat string
	// ApproxFrom is the first index (of AllTokens) whose KV is
	// approximate, or -1
	// (unknown without a record: the tape is taken as exact, as before
	// spans were recorded).
	ApproxFrom int
	spansID    uint64 // the record's arena block; 0: none
	// Tail is the closed session's open tail parked after the blocks
	// (orphantail.go); nil: none. It is no part of Tokens: it lends its
	// segments past a first change only (AllTokens).
	Tail *OrphanTail
}

// CollectOrphans rebuilds tapes from the arena's blocks (after a restart):
// blocks grouped by session, in id order, cut at the first broken chain.
// Blocks that no tape can use are freed. It returns the largest block id
// and session id seen, so new ones do not collide.
func CollectOrphans(a *shm.Arena, log *slog.Logger) (tapes []*OrphanTape, maxID, maxSession uint64) {
	drop := func(id uint64) {
		if err := a.Delete(id); err != nil {
			log.Warn("arena: freeing a block no tape can use", "id", id, "err", err)
		}
	}
	bySession := map[uint64][]shm.Meta{}
	recs := map[uint64]shm.Meta{} // spans records by session (orphanspans.go)
	var tails []shm.Meta          // open tails of closed sessions (orphantail.go)
	var order []uint64
	for _, m := range a.List() { // ascending id
		maxID, maxSession = max(maxID, m.ID), max(maxSession, m.Session)
		if isTailRecord(m) {
			tails = append(tails, m) // orphantail.go
			continue
		}
		if isSpansRecord(m) {
			if old, ok := recs[m.Session]; ok {
				drop(old.ID) // one record per session: the newest wins
			}
			recs[m.Session] = m
			continue
		}
		if _, ok := bySession[m.Session]; !ok {
			order = append(order, m.Session)
		}
		bySession[m.Session] = append(bySession[m.Session], m)
	}
	// A session that adopted an earlier session's blocks continues that
	// session's chain: its first block links to the tape ending with the
	// block its chain was computed from.
	byEnd := map[shm.Hash]*OrphanTape{}
	for _, sid := range order {
		ms := bySession[sid]
		first, err := a.Get(ms[0].ID)
		if err != nil {
			for _, m := range ms {
				drop(m.ID)
			}
			continue
		}
		t := &OrphanTape{Since: time.Now(), Session: sid, ApproxFrom: -1}
		var prev shm.Hash
		if shm.ChainHash(prev, first.Tokens) != ms[0].Chain {
			parent := (*OrphanTape)(nil)
			for end, pt := range byEnd {
				if shm.ChainHash(end, first.Tokens) == ms[0].Chain {
					parent, prev = pt, end
					break
				}
			}
			if parent == nil {
				for _, m := range ms {
					drop(m.ID)
				}
				continue
			}
			// The parent is a prefix of this tape: merge them.
			t.Blocks, t.Tokens = parent.Blocks, parent.Tokens
			delete(byEnd, prev)
			parent.Blocks = nil
		}
		broken := false
		for _, m := range ms {
			if broken {
				drop(m.ID)
				continue
			}
			b, err := a.Get(m.ID)
			if err != nil || shm.ChainHash(prev, b.Tokens) != m.Chain {
				broken = true
				drop(m.ID)
				continue
			}
			prev = m.Chain
			t.Blocks = append(t.Blocks, m)
			t.Tokens = append(t.Tokens, b.Tokens...)
		}
		if len(t.Blocks) > 0 {
			tapes = append(tapes, t)
			byEnd[prev] = t
		}
	}
	out := tapes[:0]
	for _, t := range tapes {
		if len(t.Blocks) > 0 {
			out = append(out, t)
		}
	}
	attachTails(a, out, tails, drop, log)
	attachSpans(a, out, recs, drop, log)
	return out, maxID, maxSession
}
