package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/protocol"
	"github.com/ctxd/ctxd/shm"
	"github.com/ctxd/ctxd/sidecar/internal/snapshot"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Capture: a session's state copied out under the slot token into a
// snapshot.Capture. Only memory copies happen here; the rewrite for
// compression, hashing and the writes wait for snapshot.Store.Commit,
// after the engine is released.

// capture copies sess out. The caller holds the slot token and sess is
// resident.
func (srv *Server) capture(sess *session, name string) (*snapshot.Capture, error) {
	tape := append([]engine.Token(nil), sess.tape...)
	c := snapshot.NewCapture(name, srv.ssdCompat(), tape, tiers.ElemBytes(srv.cfg.KVType))
	meta := snapshot.Meta{Format: snapshot.Format, Session: sess.name, Tape: snapshot.EncodeTape(tape), Mode: sess.layout.mode()}
	if sess.manifest != nil {
		meta.Template = sess.manifest.Template
		m, err := proto.Marshal(protocol.ManifestToWire(*sess.manifest))
		if err != nil {
			return nil, fmt.Errorf("%w: encoding the manifest: %w", protocol.ErrInternal, err)
		}
		c.Snap.Manifest = m
	}
	for _, sp := range sess.spans {
		meta.Spans = append(meta.Spans, snapshot.Span{Seg: sp.seg, Start: sp.start, End: sp.end, Generated: sp.generated})
	}
	if err := sess.layout.capture(c, &meta); err != nil {
		return nil, err
	}
	c.Mode = meta.Mode
	mb, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding snapshot metadata: %w", protocol.ErrInternal, err)
	}
	c.Snap.Meta = mb
	// The saved state continues from recomputed logits, as a restore does,
	// so the two continue identically.
	sess.logitsAt = -1
	return c, nil
}

// capture cuts the tape into blocks of snapshot.DenseBlockTokens.
func (d *denseLayout) capture(c *snapshot.Capture, _ *snapshot.Meta) error {
	tape := c.Tape
	var prev shm.Hash
	for p0 := 0; p0 < len(tape); p0 += snapshot.DenseBlockTokens {
		p1 := min(p0+snapshot.DenseBlockTokens, len(tape))
		r, err := d.env.ectx.ExtractRange(p0, p1)
		if err != nil {
			return engineErr(err)
		}
		chain := shm.ChainHash(prev, tape[p0:p1])
		prev = chain
		c.Add(coldstore.BlockMeta{Chain: chain, Tokens: tape[p0:p1], Pos0: p0}, r.Blob)
	}
	return nil
}

// capture saves every block (parked ones in extents, spilled ones by
// their SSD key) and an image of what the engine holds.
func (h *hotSet) capture(c *snapshot.Capture, meta *snapshot.Meta) error {
	hc, tape := h.env.hot, c.Tape
	sh := &snapshot.Hot{Limit: hc.limit, Window: hc.window, Block: hc.block, Sinks: hc.sinks,
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
			kv, err := h.env.tiers.CopyParked(b.id)
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
		x, err := h.env.ectx.ExtractRange(r.p, r.p+r.n)
		if err != nil {
			return engineErr(err)
		}
		idx := c.Add(coldstore.BlockMeta{Chain: r.chain, Tokens: r.toks, Pos0: r.p}, x.Blob)
		sh.Image = append(sh.Image, snapshot.Range{PStart: r.p, N: r.n, KV: idx})
	}
	meta.Hot = sh
	return nil
}

// captureSession takes the slot, makes the session resident and captures
// it. Session state changes only under the slot token, so a call in
// flight on the session is simply waited for (it holds the token for its
// whole run) and the capture sees the state between two calls.
func (srv *Server) captureSession(ctx context.Context, sess *session, name string) (*snapshot.Capture, error) {
	if err := srv.slot.acquire(ctx); err != nil {
		return nil, fmt.Errorf("%w: waiting for the engine: %w", protocol.ErrCancelled, err)
	}
	defer srv.slot.release()
	if sess.closed {
		return nil, fmt.Errorf("%w: session %d is closed", protocol.ErrNotFound, sess.id)
	}
	if srv.slot.model == nil {
		return nil, protocol.ErrNoModel
	}
	if err := srv.slot.makeResident(sess); err != nil {
		return nil, err
	}
	c, err := srv.capture(sess, name)
	if err == nil {
		sess.savedVersion = sess.version
	}
	return c, err
}
