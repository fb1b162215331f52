package layout

import (
	"context"
	"fmt"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/shm"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
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

// orphanBlocks keeps a closing session's parked blocks as an orphan tape
// (the chain-contiguous prefix of blocks with an arena copy); the rest of
// the arena copies are freed. The caller holds the engine token.
func (h *hotSet) orphanBlocks() {
	t := h.env.Tiers
	o := &tiers.OrphanTape{Since: time.Now(), Session: h.sessionID}
	contiguous := true
	for _, b := range h.blocks {
		if b.res.copyTier() != tiers.Arena {
			contiguous = false
			continue
		}
		if !contiguous {
			h.dropCopy(b)
			continue
		}
		o.Blocks = append(o.Blocks, shm.Meta{ID: b.id, Session: h.sessionID, Chain: b.chain, Class: uint8(b.class), Kind: uint8(b.kind),
			SegID: b.segID, Pos: int32(b.pos0), NTokens: b.n})
		o.Tokens = append(o.Tokens, h.tape.tokens[b.vstart:b.vstart+b.n]...)
	}
	// Its segments and approximate mark go with it (orphanspans.go).
	o.Spans, o.ApproxFrom = wholeSpans(h.tape.spans, len(o.Tokens)), approxWithin(h.tape.approxFrom, len(o.Tokens))
	t.KeepOrphan(o)
}

// AdoptOrphan makes orphan tape i the empty hot-set session's stream: its
// blocks become the session's parked blocks, and the sinks, pinned blocks
// and the recent window come back into the engine. The stream is then cut
// to its first upto tokens (a block boundary). The caller holds the
// engine token and the session is resident.
func (h *hotSet) AdoptOrphan(i, upto int) (int, int, error) {
	t, hc, tape := h.env.Tiers, h.env.Hot, h.tape
	o := t.TakeOrphan(i)
	if err := h.Clear(); err != nil {
		return 0, 0, err
	}
	v := 0
	for k, m := range o.Blocks {
		b := &hotBlock{id: m.ID, seq: k, vstart: v, n: m.NTokens, class: policy.CacheClass(m.Class), kind: policy.SegmentKind(m.Kind),
			segID: m.SegID, pinned: policy.SegmentKind(m.Kind) == policy.KindPinned, chain: m.Chain, pos0: int(m.Pos), res: resParked}
		h.index.Add(b.id, o.Tokens[v:v+b.n])
		h.blocks = append(h.blocks, b)
		v += b.n
	}
	tape.tokens = append(tape.tokens[:0], o.Tokens...)
	tape.spans = []Span{{Seg: policy.Segment{ID: "<resumed>", Kind: policy.KindRepoMap, Class: policy.ClassRepoMap, Stable: true}, Start: 0, End: len(o.Tokens)}}
	if len(o.Spans) > 0 {
		// Recorded with its blocks: the sync that follows finds the
		// tape's unchanged segments past the first change by them.
		tape.spans = tapeSpans(o.Spans)
	}
	if o.ApproxFrom >= 0 {
		tape.markApprox(o.ApproxFrom)
	}
	h.tailV, h.tailP = len(tape.tokens), 0
	// Bring back what must be hot (policy.PlanAdoption decides): sinks
	// and pinned blocks, then the most recent blocks that fit the recent
	// window, in stream order.
	cands := make([]policy.HotBlock, len(h.blocks))
	for k, b := range h.blocks {
		cands[k] = policy.HotBlock{ID: b.id, Tokens: b.n, Class: b.class, Kind: b.kind, Seq: b.seq, Pinned: b.pinned}
	}
	want := map[uint64]bool{}
	for _, id := range policy.PlanAdoption(policy.AdoptInput{Blocks: cands, SinkTokens: hc.Sinks, RecentTokens: hc.Recent, RoomTokens: hc.Limits().AdoptRoom()}) {
		want[id] = true
	}
	pos := 0
	var kv []byte
	for _, b := range h.blocks {
		if !want[b.id] {
			continue
		}
		var err error
		if kv, err = t.ReadParked(b.id, kv[:0]); err == nil {
			err = t.Insert(h.env.Engine, b.id, engine.Range{Pos0: b.pos0, Count: b.n, Blob: kv}, pos)
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
	tape.logitsAt = -1
	h.note(fmt.Sprintf("resumed %d tokens (%d blocks) parked in the arena by a closed session or an earlier ctxd", len(tape.tokens), len(h.blocks)))
	// An adopted tape has no turn to go back to; its blocks are in the
	// arena (memory), so the cut's reads do not wait on a disk.
	n, err := h.cut(context.Background(), upto)
	if err != nil {
		return 0, 0, err
	}
	return n, len(h.blocks), nil
}
