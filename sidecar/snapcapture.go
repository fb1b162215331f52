package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/protocol"
	"github.com/ctxd/ctxd/shm"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Capture: a session's state copied out under the slot token. Only
// memory copies happen here; the rewrite for compression, hashing and the
// writes wait for commit (snapshots.go), after the engine is released.

// pendingBlob is a blob a snapshot needs that the store may not hold yet:
// one or more engine blobs, laid out by commit (ssdblob.go).
type pendingBlob struct {
	idx   int // its entry in snap.Blocks, whose key commit fills in
	meta  coldstore.BlockMeta
	parts [][]byte
}

// snapCapture is a session's state copied out under the slot token.
type snapCapture struct {
	snap      coldstore.Snapshot
	pending   []pendingBlob
	tape      []engine.Token
	mode      string
	raw       int64
	elemBytes int
}

// add appends a blob of parts and returns its index in snap.Blocks.
func (c *snapCapture) add(meta coldstore.BlockMeta, parts ...[]byte) int {
	meta.ElemBytes = c.elemBytes
	c.snap.Blocks = append(c.snap.Blocks, coldstore.SnapshotBlock{Tokens: len(meta.Tokens)})
	for _, p := range parts {
		c.raw += int64(len(p))
	}
	c.pending = append(c.pending, pendingBlob{idx: len(c.snap.Blocks) - 1, meta: meta, parts: parts})
	return len(c.snap.Blocks) - 1
}

// addStored adds a blob the store already holds (a spill) by its key.
func (c *snapCapture) addStored(key coldstore.Key, tokens int) int {
	c.snap.Blocks = append(c.snap.Blocks, coldstore.SnapshotBlock{Key: key, Tokens: tokens})
	return len(c.snap.Blocks) - 1
}

// capture copies sess out. The caller holds the slot token and sess is
// resident.
func (srv *Server) capture(sess *session, name string) (*snapCapture, error) {
	tape := append([]engine.Token(nil), sess.tape...)
	c := &snapCapture{snap: coldstore.Snapshot{Name: name, Created: time.Now(), Compat: srv.ssdCompat()}, tape: tape,
		elemBytes: tiers.ElemBytes(srv.cfg.KVType)}
	meta := snapMeta{Format: snapFormat, Session: sess.name, Tape: encodeTape(tape), Mode: sess.layout.mode()}
	if sess.manifest != nil {
		meta.Template = sess.manifest.Template
		m, err := proto.Marshal(protocol.ManifestToWire(*sess.manifest))
		if err != nil {
			return nil, fmt.Errorf("%w: encoding the manifest: %w", protocol.ErrInternal, err)
		}
		c.snap.Manifest = m
	}
	for _, sp := range sess.spans {
		meta.Spans = append(meta.Spans, snapSpan{Seg: sp.seg, Start: sp.start, End: sp.end, Generated: sp.generated})
	}
	if err := sess.layout.capture(c, &meta); err != nil {
		return nil, err
	}
	c.mode = meta.Mode
	mb, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding snapshot metadata: %w", protocol.ErrInternal, err)
	}
	c.snap.Meta = mb
	// The saved state continues from recomputed logits, as a restore does,
	// so the two continue identically.
	sess.logitsAt = -1
	return c, nil
}

// capture cuts the tape into blocks of denseBlockTokens.
func (d *denseLayout) capture(c *snapCapture, _ *snapMeta) error {
	tape := c.tape
	var prev shm.Hash
	for p0 := 0; p0 < len(tape); p0 += denseBlockTokens {
		p1 := min(p0+denseBlockTokens, len(tape))
		r, err := d.env.ectx.ExtractRange(p0, p1)
		if err != nil {
			return engineErr(err)
		}
		chain := shm.ChainHash(prev, tape[p0:p1])
		prev = chain
		c.add(coldstore.BlockMeta{Chain: chain, Tokens: tape[p0:p1], Pos0: p0}, r.Blob)
	}
	return nil
}

// capture saves every block (parked ones in extents, spilled ones by
// their SSD key) and an image of what the engine holds.
func (h *hotSet) capture(c *snapCapture, meta *snapMeta) error {
	hc, tape := h.env.hot, c.tape
	sh := &snapHot{Limit: hc.limit, Window: hc.window, Block: hc.block, Sinks: hc.sinks,
		TailV: h.tailV, TailP: h.tailP, Turn: h.turn, Evictions: h.evictions, Admissions: h.admissions}
	// Parked blocks are saved in extents of up to extentBlocks blocks
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
		idx := c.add(coldstore.BlockMeta{Chain: ext.chain, Tokens: ext.toks, Pos0: ext.pos0}, ext.parts...)
		for _, i := range ext.members {
			sh.Blocks[i].KV = idx
		}
		ext = extent{}
	}
	for _, b := range h.blocks {
		sb := snapBlock{VStart: b.vstart, N: b.n, Class: b.class, Kind: b.kind, SegID: b.segID, Pinned: b.pinned,
			Chain: b.chain, Hot: b.res.inEngine(), PStart: b.pstart, Pos0: b.pos0, KV: -1, Len: -1, LastUsed: b.lastUsed,
			Score: b.score, Reason: b.reason, Retrieved: b.retrieved}
		toks := tape[b.vstart : b.vstart+b.n]
		switch b.res.copyTier() {
		case tiers.Arena:
			if len(ext.members) > 0 && b.seq/extentBlocks != ext.group {
				flush()
			}
			kv, err := h.env.tiers.CopyParked(b.id)
			if err != nil {
				b.res = b.res.withCopy(tiers.None)
				h.note(fmt.Sprintf("block %d unreadable from the arena while saving: %v", b.id, err))
				break
			}
			if len(ext.members) == 0 {
				ext.group, ext.pos0 = b.seq/extentBlocks, b.pos0
			}
			sb.Off, sb.Len = ext.size, len(kv)
			ext.size += len(kv)
			ext.parts = append(ext.parts, kv)
			ext.chain = b.chain
			ext.toks = append(ext.toks, toks...)
			ext.members = append(ext.members, len(sh.Blocks))
		case tiers.SSD:
			sb.KV = c.addStored(b.ssdKey, len(toks))
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
		idx := c.add(coldstore.BlockMeta{Chain: r.chain, Tokens: r.toks, Pos0: r.p}, x.Blob)
		sh.Image = append(sh.Image, snapRange{PStart: r.p, N: r.n, KV: idx})
	}
	meta.Hot = sh
	return nil
}

// captureSession takes the slot, makes the session resident and captures
// it. Session state changes only under the slot token, so a call in
// flight on the session is simply waited for (it holds the token for its
// whole run) and the capture sees the state between two calls.
func (srv *Server) captureSession(ctx context.Context, sess *session, name string) (*snapCapture, error) {
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
