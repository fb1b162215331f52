package sidecar

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
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

// orphanTape is a chain-verified run of parked blocks without a session.
type orphanTape struct {
	blocks []shm.Meta
	tokens []engine.Token // the blocks' tokens, in order
	since  time.Time
}

// collectOrphans rebuilds tapes from the arena's blocks (after a restart):
// blocks grouped by session, in id order, cut at the first broken chain.
// Blocks that no tape can use are freed. It returns the largest block id
// and session id seen, so new ones do not collide.
func collectOrphans(a *shm.Arena, log *slog.Logger) (tapes []*orphanTape, maxID, maxSession uint64) {
	drop := func(id uint64) {
		if err := a.Delete(id); err != nil {
			log.Warn("arena: freeing a block no tape can use", "id", id, "err", err)
		}
	}
	bySession := map[uint64][]shm.Meta{}
	var order []uint64
	for _, m := range a.List() { // ascending id
		maxID, maxSession = max(maxID, m.ID), max(maxSession, m.Session)
		if _, ok := bySession[m.Session]; !ok {
			order = append(order, m.Session)
		}
		bySession[m.Session] = append(bySession[m.Session], m)
	}
	// A session that adopted an earlier session's blocks continues that
	// session's chain: its first block links to the tape ending with the
	// block its chain was computed from.
	byEnd := map[shm.Hash]*orphanTape{}
	for _, sid := range order {
		ms := bySession[sid]
		first, err := a.Get(ms[0].ID)
		if err != nil {
			for _, m := range ms {
				drop(m.ID)
			}
			continue
		}
		t := &orphanTape{since: time.Now()}
		var prev shm.Hash
		if shm.ChainHash(prev, first.Tokens) != ms[0].Chain {
			parent := (*orphanTape)(nil)
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
			t.blocks, t.tokens = parent.blocks, parent.tokens
			delete(byEnd, prev)
			parent.blocks = nil
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
			t.blocks = append(t.blocks, m)
			t.tokens = append(t.tokens, b.Tokens...)
		}
		if len(t.blocks) > 0 {
			tapes = append(tapes, t)
			byEnd[prev] = t
		}
	}
	out := tapes[:0]
	for _, t := range tapes {
		if len(t.blocks) > 0 {
			out = append(out, t)
		}
	}
	return out, maxID, maxSession
}

// orphanBlocks keeps a closing session's parked blocks as an orphan tape
// (the chain-contiguous prefix of blocks with an arena copy); the rest of
// the arena copies are freed. The caller holds the slot token.
func (h *hotSet) orphanBlocks() {
	t := h.env.tiers
	o := &orphanTape{since: time.Now()}
	contiguous := true
	for _, b := range h.blocks {
		if b.res.copyTier() != tierArena {
			contiguous = false
			continue
		}
		if !contiguous {
			h.dropCopy(b)
			continue
		}
		o.blocks = append(o.blocks, shm.Meta{ID: b.id, Session: h.sess.id, Chain: b.chain, Class: uint8(b.class), Kind: uint8(b.kind),
			SegID: b.segID, Pos: int32(b.pos0), NTokens: b.n})
		o.tokens = append(o.tokens, h.sess.tape[b.vstart:b.vstart+b.n]...)
	}
	t.keepOrphan(o)
}

// adoptOrphan makes orphan tape i the empty hot-set session's stream: its
// blocks become the session's parked blocks, and the sinks, pinned blocks
// and the recent window come back into the engine. The stream is then cut
// to its first upto tokens (a block boundary). The caller holds the
// slot token and the session is resident.
func (h *hotSet) adoptOrphan(i, upto int) (int, int, error) {
	t, hc, sess := h.env.tiers, h.env.hot, h.sess
	o := t.takeOrphan(i)
	if err := h.clear(); err != nil {
		return 0, 0, err
	}
	v := 0
	for k, m := range o.blocks {
		b := &hotBlock{id: m.ID, seq: k, vstart: v, n: m.NTokens, class: policy.CacheClass(m.Class), kind: policy.SegmentKind(m.Kind),
			segID: m.SegID, pinned: policy.SegmentKind(m.Kind) == policy.KindPinned, chain: m.Chain, pos0: int(m.Pos), res: resParked}
		h.index.Add(b.id, o.tokens[v:v+b.n])
		h.blocks = append(h.blocks, b)
		v += b.n
	}
	sess.tape = append(sess.tape[:0], o.tokens...)
	sess.spans = []span{{seg: policy.Segment{ID: "<resumed>", Kind: policy.KindRepoMap, Class: policy.ClassRepoMap, Stable: true}, start: 0, end: len(o.tokens)}}
	h.tailV, h.tailP = len(sess.tape), 0
	// Bring back what must be hot (policy.PlanAdoption decides): sinks
	// and pinned blocks, then the most recent blocks that fit the recent
	// window, in stream order.
	cands := make([]policy.HotBlock, len(h.blocks))
	for k, b := range h.blocks {
		cands[k] = policy.HotBlock{ID: b.id, Tokens: b.n, Class: b.class, Kind: b.kind, Seq: b.seq, Pinned: b.pinned}
	}
	want := map[uint64]bool{}
	for _, id := range policy.PlanAdoption(policy.AdoptInput{Blocks: cands, SinkTokens: hc.sinks, RecentTokens: hc.recent, RoomTokens: hc.limits().AdoptRoom()}) {
		want[id] = true
	}
	pos := 0
	var kv []byte
	for _, b := range h.blocks {
		if !want[b.id] {
			continue
		}
		var err error
		if kv, err = t.readParked(b.id, kv[:0]); err == nil {
			err = t.insert(h.env.ectx, b.id, engine.Range{Pos0: b.pos0, Count: b.n, Blob: kv}, pos)
		}
		if err != nil {
			h.note(fmt.Sprintf("resumed block %d not brought back: %v", b.id, err))
			continue
		}
		b.res, b.pstart = b.res.admitted(), pos
		pos += b.n
		h.admissions++
	}
	h.tailP = pos
	sess.logitsAt = -1
	h.note(fmt.Sprintf("resumed %d tokens (%d blocks) parked in the arena by a closed session or an earlier ctxd", len(sess.tape), len(h.blocks)))
	n, err := h.cut(upto)
	if err != nil {
		return 0, 0, err
	}
	return n, len(h.blocks), nil
}
