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
// the arena copies are freed. With withTail (the session is resident) its
// open tail is parked beside them (parkTail). The caller holds the engine
// token.
func (h *hotSet) orphanBlocks(withTail bool) {
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
	if withTail {
		h.parkTail(o)
	}
	// Its segments and approximate mark go with it (orphanspans.go), the
	// tail's too.
	n := len(o.Tokens)
	if o.Tail != nil {
		n += len(o.Tail.Tokens)
	}
	o.Spans, o.ApproxFrom = wholeSpans(h.tape.spans, n), approxWithin(h.tape.approxFrom, n)
	t.KeepOrphan(o)
}

// parkTail parks the closing session's open tail (its last message and
// generation prompt or reply, never sealed into a block) as o's tail
// (tiers/orphantail.go), when it follows o's blocks and completes a
// segment (a tail lends whole segments only). Its KV is taken from the
// engine; a failure leaves o without a tail.
func (h *hotSet) parkTail(o *tiers.OrphanTape) {
	n := len(o.Tokens)
	if len(o.Blocks) == 0 || n != h.tailV || n >= len(h.tape.tokens) || h.env.Engine == nil {
		return
	}
	spans := wholeSpans(h.tape.spans, len(h.tape.tokens))
	if len(spans) == 0 || spans[len(spans)-1].End <= n {
		return
	}
	r, err := h.env.Engine.ExtractRange(h.tailP, h.physEnd())
	if err != nil {
		h.note(fmt.Sprintf("open tail not parked at close: %v", err))
		return
	}
	h.env.Tiers.ParkTail(o, h.env.NewBlockID(), h.tape.tokens[n:], r)
}

// AdoptOrphan makes orphan tape i the empty hot-set session's stream: its
// blocks become the session's parked blocks, and the sinks, pinned blocks
// and the recent window come back into the engine; when upto reaches past
// the blocks (the resume keeps segments of the closed session's open
// tail), the tail comes back as the open tail. The stream is then cut to
// its first upto tokens. The caller holds the engine token and the
// session is resident.
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
	if upto > len(tape.tokens) && o.Tail != nil {
		// The plan keeps segments of the closed session's open tail:
		// it becomes the open tail again, after the blocks brought back.
		toks, at, id := o.Tail.Tokens, o.Tail.Pos, o.Tail.ID
		kv, ok := t.TakeTail(o)
		if ok {
			ok = t.Insert(h.env.Engine, id, engine.Range{Pos0: int(at), Count: len(toks), Blob: kv}, pos) == nil
		}
		if ok {
			tape.tokens = append(tape.tokens, toks...)
		} else {
			h.note("resumed tape's open tail not brought back: prefilled")
		}
	}
	t.DropTail(o)
	tape.spans = []Span{{Seg: policy.Segment{ID: "<resumed>", Kind: policy.KindRepoMap, Class: policy.ClassRepoMap, Stable: true}, Start: 0, End: len(tape.tokens)}}
	if len(o.Spans) > 0 {
		// Recorded with its blocks: the sync that follows finds the
		// tape's unchanged segments past the first change by them (those
		// of a tail left behind are dropped).
		tape.spans = wholeTapeSpans(tapeSpans(o.Spans), len(tape.tokens))
	}
	if a := approxWithin(o.ApproxFrom, len(tape.tokens)); a >= 0 {
		tape.markApprox(a)
	}
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
