package layout

import (
	"context"
	"errors"
	"fmt"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/shm"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Streaming tokens into a hot set: the tail grows, full blocks are sealed
// and their KV parked in the tiers (the arena, the SSD tier once a full
// arena spills).

// AppendTokens decodes toks after the tape, evicting hot blocks first
// whenever the next chunk would pass the limit, and seals blocks as they
// fill. Eviction frees room for a whole chunk at once (a quarter of the
// hot budget), so prefill runs in large batches and positions are
// compacted once per chunk, not once per block.
func (h *hotSet) AppendTokens(ctx context.Context, toks []engine.Token) error {
	tape, hc, ectx := h.tape, h.env.Hot, h.env.Engine
	batch := ectx.Options().BatchTokens
	chunk := hc.Limits().ChunkTokens()
	total := len(toks)
	defer func() { h.env.Progress(ctx, "prefill", total-len(toks), total) }()
	for len(toks) > 0 {
		h.env.Progress(ctx, "prefill", total-len(toks), total)
		if len(toks) < total {
			if err := h.env.Yield(); err != nil { // other sessions' turns
				return err
			}
		}
		want := min(len(toks), chunk)
		if free := hc.Limit - h.used(); free < want {
			if err := h.evictFor(want - free); err != nil {
				return err
			}
		}
		end := h.physEnd()
		n := min(len(toks), hc.Limit-end, batch)
		if err := ectx.Decode(ctx, toks[:n], end); err != nil {
			tape.logitsAt = -1
			return EngineErr(err)
		}
		tape.tokens = append(tape.tokens, toks[:n]...)
		tape.logitsAt = len(tape.tokens)
		toks = toks[n:]
		for len(tape.tokens) >= h.nextSeal() {
			h.seal(ctx)
		}
	}
	return nil
}

// seal turns the open tail into a block: its KV is copied to the arena
// (when the arena has room) and its tokens indexed for retrieval.
func (h *hotSet) seal(ctx context.Context) {
	tape := h.tape
	n := h.nextSeal() - h.tailV
	var prev shm.Hash
	if k := len(h.blocks); k > 0 {
		prev = h.blocks[k-1].chain
	}
	toks := tape.tokens[h.tailV : h.tailV+n]
	b := &hotBlock{
		id: h.env.NewBlockID(), seq: len(h.blocks), vstart: h.tailV, n: n,
		chain: shm.ChainHash(prev, toks), res: resHotOnly, pstart: h.tailP, pos0: h.tailP, lastUsed: h.turn,
	}
	c := policy.ClassifyBlock(segmentSpans(tape.spans), b.vstart, b.vstart+n)
	b.class, b.kind, b.segID, b.pinned = c.Class, c.Kind, c.SegmentID, c.Pinned
	if r, err := h.env.Engine.ExtractRange(b.pstart, b.pstart+n); err == nil {
		if h.park(ctx, b, toks, r.Blob) {
			b.res = b.res.withCopy(tiers.Arena)
		}
		h.summarizeSealed(b, r)
	} else {
		h.note(fmt.Sprintf("block %d not parked: %v", b.id, err))
	}
	h.index.Add(b.id, toks)
	h.blocks = append(h.blocks, b)
	h.tailV += n
	h.tailP += n
}

// segmentSpans are spans as policy sees them.
func segmentSpans(spans []Span) []policy.SegmentSpan {
	out := make([]policy.SegmentSpan, len(spans))
	for i, sp := range spans {
		out[i] = policy.SegmentSpan{Segment: sp.Seg, Start: sp.Start, End: sp.End}
	}
	return out
}

// park copies a block's KV to the arena, making room when it is full by
// spilling the session's most evictable parked block to the SSD tier (or
// dropping it when the SSD tier cannot take it). It reports whether the
// block was parked.
func (h *hotSet) park(ctx context.Context, b *hotBlock, toks []engine.Token, kv []byte) bool {
	t := h.env.Tiers
	if !t.HasArena() {
		return false
	}
	blk := shm.Block{ID: b.id, Session: h.sessionID, Chain: b.chain, Class: uint8(b.class), Kind: uint8(b.kind),
		SegID: clipString(b.segID, shm.MaxSegIDLen), Pos: int32(b.pos0), Tokens: toks, KV: kv}
	for {
		err := t.Park(blk)
		if err == nil {
			return true
		}
		if !errors.Is(err, shm.ErrArenaFull) {
			h.note(fmt.Sprintf("block %d not parked: %v", b.id, err))
			return false
		}
		victim := h.arenaVictim()
		if victim == nil && errors.Is(err, tiers.ErrNoSpace) {
			// The arena's filesystem is full: the block goes straight to
			// the SSD tier rather than being lost at its eviction.
			meta := coldstore.BlockMeta{Chain: b.chain, Tokens: append([]engine.Token(nil), toks...), Pos0: b.pos0, Class: uint8(b.class), Segment: b.segID}
			if key, serr := t.StoreBlock(ctx, meta, append([]byte(nil), kv...)); serr == nil {
				b.ssdKey, b.res = key, b.res.withCopy(tiers.SSD)
				return false
			} else {
				h.note(fmt.Sprintf("arena's filesystem full and the SSD tier cannot take block %d: %v", b.id, serr))
			}
		}
		if victim == nil {
			h.note(fmt.Sprintf("arena full: block %d kept only while hot", b.id))
			return false
		}
		if err := h.spill(ctx, victim); err != nil {
			h.env.Counters.ArenaDropped()
			h.note(fmt.Sprintf("arena full: dropped parked block %d (tokens %d..%d, %s); the SSD tier could not take it: %v", victim.id, victim.vstart, victim.vstart+victim.n, victim.class, err))
			victim.res = victim.res.withCopy(tiers.None)
		}
		t.DropParked(victim.id)
	}
}

// spill moves a parked block's copy from the arena to the SSD tier: the
// block stays retrievable (admission reads it back from the SSD).
func (h *hotSet) spill(ctx context.Context, b *hotBlock) error {
	toks := append([]engine.Token(nil), h.tape.tokens[b.vstart:b.vstart+b.n]...)
	meta := coldstore.BlockMeta{Chain: b.chain, Tokens: toks, Pos0: b.pos0, Class: uint8(b.class), Segment: b.segID}
	key, err := h.env.Tiers.Spill(ctx, b.id, b.ssdKey, meta)
	if err != nil {
		return err
	}
	b.ssdKey, b.res = key, b.res.withCopy(tiers.SSD)
	return nil
}

// dropCopy frees the block's copy below the engine.
func (h *hotSet) dropCopy(b *hotBlock) {
	h.env.Tiers.Drop(b.res.copyTier(), b.id, b.ssdKey)
	b.res = b.res.withCopy(tiers.None)
}

// arenaVictim is the session's block parked in the arena (and not in the
// engine) that policy.SpillVictim moves out first.
func (h *hotSet) arenaVictim() *hotBlock {
	var cands []policy.HotBlock
	for _, b := range h.blocks {
		if b.res == resParked {
			cands = append(cands, policy.HotBlock{ID: b.id, Tokens: b.n, Class: b.class, Kind: b.kind, Seq: b.seq, Score: b.score, LastUsed: b.lastUsed})
		}
	}
	if id, ok := policy.SpillVictim(cands); ok {
		return h.find(id)
	}
	return nil
}
