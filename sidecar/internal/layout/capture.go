package layout

import (
	"fmt"
	"sort"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/shm"
	"github.com/ctxd/ctxd/sidecar/internal/snapshot"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Capture: each layout copies its KV out for a snapshot under the engine
// token, with memory copies only (snapshot.Capture).

// Capture cuts the tape into blocks of snapshot.DenseBlockTokens.
func (d *denseLayout) Capture(c *snapshot.Capture, _ *snapshot.Meta) error {
	tape := c.Tape
	var prev shm.Hash
	for p0 := 0; p0 < len(tape); p0 += snapshot.DenseBlockTokens {
		p1 := min(p0+snapshot.DenseBlockTokens, len(tape))
		r, err := d.env.Engine.ExtractRange(p0, p1)
		if err != nil {
			return EngineErr(err)
		}
		chain := shm.ChainHash(prev, tape[p0:p1])
		prev = chain
		c.Add(coldstore.BlockMeta{Chain: chain, Tokens: tape[p0:p1], Pos0: p0}, r.Blob)
	}
	return nil
}

// Capture saves every block (parked ones in extents, spilled ones by
// their SSD key) and an image of what the engine holds.
func (h *hotSet) Capture(c *snapshot.Capture, meta *snapshot.Meta) error {
	hc, tape := h.env.Hot, c.Tape
	sh := &snapshot.Hot{Limit: hc.Limit, Window: hc.Window, Block: hc.Block, Sinks: hc.Sinks,
		TailV: h.tailV, TailP: h.tailP, Turn: h.turn, Evictions: h.evictions, Admissions: h.admissions}
	// Parked blocks are saved in extents of up to snapshot.ExtentBlocks blocks
	// (grouped by sequence number, so unchanged extents are shared
	// between snapshots): zstd finds more to share in larger inputs.
	type extent struct {
		group, pos0, size int
		chain             shm.Hash
		parts             [][]byte
		toks              []engine.Token
		members           []int // indexes into sh.Blocks
	}
	var ext extent
	flush := func() {
		if len(ext.members) == 0 {
			return
		}
		idx := c.Add(coldstore.BlockMeta{Chain: ext.chain, Tokens: ext.toks, Pos0: ext.pos0}, ext.parts...)
		for _, i := range ext.members {
			sh.Blocks[i].KV = idx
		}
		ext = extent{}
	}
	for _, b := range h.blocks {
		sb := snapshot.Block{VStart: b.vstart, N: b.n, Class: b.class, Kind: b.kind, SegID: b.segID, Pinned: b.pinned,
			Chain: b.chain, Hot: b.res.inEngine(), PStart: b.pstart, Pos0: b.pos0, KV: -1, Len: -1, LastUsed: b.lastUsed,
			Score: b.score, Reason: b.reason, Retrieved: b.retrieved}
		toks := tape[b.vstart : b.vstart+b.n]
		switch b.res.copyTier() {
		case tiers.Arena:
			if len(ext.members) > 0 && b.seq/snapshot.ExtentBlocks != ext.group {
				flush()
			}
			kv, err := h.env.Tiers.CopyParked(b.id)
			if err != nil {
				b.res = b.res.withCopy(tiers.None)
				h.note(fmt.Sprintf("block %d unreadable from the arena while saving: %v", b.id, err))
				break
			}
			if len(ext.members) == 0 {
				ext.group, ext.pos0 = b.seq/snapshot.ExtentBlocks, b.pos0
			}
			sb.Off, sb.Len = ext.size, len(kv)
			ext.size += len(kv)
			ext.parts = append(ext.parts, kv)
			ext.chain = b.chain
			ext.toks = append(ext.toks, toks...)
			ext.members = append(ext.members, len(sh.Blocks))
		case tiers.SSD:
			sb.KV = c.AddStored(b.ssdKey, len(toks))
		}
		sh.Blocks = append(sh.Blocks, sb)
	}
	flush()
	// The image: what the engine holds, at the positions it holds it.
	type rng struct {
		p, n  int
		chain shm.Hash
		toks  []engine.Token
	}
	var rs []rng
	for _, b := range h.blocks {
		if b.res.inEngine() {
			rs = append(rs, rng{b.pstart, b.n, b.chain, tape[b.vstart : b.vstart+b.n]})
		}
	}
	if n := len(tape) - h.tailV; n > 0 {
		var prev shm.Hash
		if k := len(h.blocks); k > 0 {
			prev = h.blocks[k-1].chain
		}
		rs = append(rs, rng{h.tailP, n, shm.ChainHash(prev, tape[h.tailV:]), tape[h.tailV:]})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].p < rs[j].p })
	for _, r := range rs {
		x, err := h.env.Engine.ExtractRange(r.p, r.p+r.n)
		if err != nil {
			return EngineErr(err)
		}
		idx := c.Add(coldstore.BlockMeta{Chain: r.chain, Tokens: r.toks, Pos0: r.p}, x.Blob)
		sh.Image = append(sh.Image, snapshot.Range{PStart: r.p, N: r.n, KV: idx})
	}
	sh.Mark = h.mark.saved(len(h.blocks), len(tape))
	meta.Hot = sh
	return nil
}
