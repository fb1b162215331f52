package sidecar

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/shm"
)

// A snapshot is a session written to the SSD tier: its manifest, the
// ordered list of its KV blocks (content-addressed, so blocks shared with
// earlier snapshots are written once) and metadata that rebuilds the
// session exactly: the token tape, the segment spans and, for hot-set
// sessions, every block's place plus an image of what the engine held.
//
// Snapshots are taken in two steps: capture runs under the slot token and
// copies bytes out of the engine and the arena (fast: memory copies);
// write runs without it and compresses, writes and commits (slow: SSD).
// A snapshot is committed when SaveSnapshot returns; only then does a
// caller hear that it exists.

// denseBlockTokens cuts a dense session into blocks for the SSD tier.
const denseBlockTokens = 1024

// minAutoSnapshotTokens is the smallest session an automatic snapshot saves.
const minAutoSnapshotTokens = 64

// snapFormat versions snapMeta.
const snapFormat = 1

// snapMeta is a snapshot's session metadata (JSON in Snapshot.Meta).
type snapMeta struct {
	Format   int        `json:"format"`
	Mode     string     `json:"mode"` // "dense" or "hot"
	Session  string     `json:"session,omitempty"`
	Template string     `json:"template"`
	Tape     []byte     `json:"tape"` // int32 little-endian
	Spans    []snapSpan `json:"spans"`
	Hot      *snapHot   `json:"hot,omitempty"`
}

type snapSpan struct {
	Seg       policy.Segment `json:"seg"`
	Start     int            `json:"start"`
	End       int            `json:"end"`
	Generated bool           `json:"generated,omitempty"`
}

// snapHot is a hot-set session: its blocks and the engine's image.
type snapHot struct {
	Limit, Window, Block, Sinks int
	TailV, TailP                int
	Turn, Evictions, Admissions int64
	Blocks                      []snapBlock
	Image                       []snapRange // hot blocks and the tail, by position
}

type snapBlock struct {
	VStart, N int
	Class     policy.CacheClass
	Kind      policy.SegmentKind
	SegID     string
	Pinned    bool
	Chain     shm.Hash
	Hot       bool
	PStart    int
	Pos0      int
	KV        int  // index into Snapshot.Blocks of its parked KV; -1: none
	Off, Len  int  // its bytes in that blob; Len -1: the whole blob
	TM        bool // those bytes are the BlobCodec's TokenMajor rewrite of the engine's
	LastUsed  int64
	Score     float64
	Reason    string
	Retrieved bool
}

// extentBlocks parked blocks at most share one SSD-tier blob.
const extentBlocks = 16

// extent is parked blocks' KV being gathered into one blob.
type extent struct {
	group   int
	pos0    int
	chain   shm.Hash
	blob    []byte
	toks    []engine.Token
	members []int // indexes into snapHot.Blocks
}

type snapRange struct {
	PStart, N int
	KV        int
}

func encodeTape(t []engine.Token) []byte {
	b := make([]byte, 4*len(t))
	for i, v := range t {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return b
}

func decodeTape(b []byte) ([]engine.Token, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("tape of %d bytes is not whole tokens", len(b))
	}
	t := make([]engine.Token, len(b)/4)
	for i := range t {
		t[i] = engine.Token(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return t, nil
}

// snapEntry is what the server remembers of a stored snapshot for
// cross-session resume.
type snapEntry struct {
	name    string
	created time.Time
	compat  coldstore.Compat
	mode    string
	tape    []engine.Token
}

// pendingBlob is a block a snapshot needs that the store may not hold yet.
type pendingBlob struct {
	idx  int // its entry in snap.Blocks, whose key write fills in
	meta coldstore.BlockMeta
	blob []byte
}

// snapCapture is a session's state copied out under the slot token.
type snapCapture struct {
	snap    coldstore.Snapshot
	pending []pendingBlob
	tape    []engine.Token
	mode    string
	raw     int64
}

func (c *snapCapture) add(meta coldstore.BlockMeta, blob []byte) int {
	c.snap.Blocks = append(c.snap.Blocks, coldstore.SnapshotBlock{Tokens: len(meta.Tokens)})
	c.raw += int64(len(blob))
	c.pending = append(c.pending, pendingBlob{idx: len(c.snap.Blocks) - 1, meta: meta, blob: blob})
	return len(c.snap.Blocks) - 1
}

// capture copies sess out. The caller holds the slot token and sess is
// resident.
func (srv *Server) capture(sess *session, name string) (*snapCapture, error) {
	compat := srv.coldCompat()
	eb := elemBytes(srv.cfg.KVType)
	tape := append([]engine.Token(nil), sess.tape...)
	c := &snapCapture{snap: coldstore.Snapshot{Name: name, Created: time.Now(), Compat: compat}, tape: tape}
	meta := snapMeta{Format: snapFormat, Session: sess.name, Tape: encodeTape(tape)}
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
	ectx := srv.slot.ectx
	if sess.hot == nil {
		meta.Mode = "dense"
		var prev shm.Hash
		for p0 := 0; p0 < len(tape); p0 += denseBlockTokens {
			p1 := min(p0+denseBlockTokens, len(tape))
			r, err := ectx.ExtractRange(p0, p1)
			if err != nil {
				return nil, engineErr(err)
			}
			chain := shm.ChainHash(prev, tape[p0:p1])
			prev = chain
			c.add(coldstore.BlockMeta{Chain: chain, Tokens: tape[p0:p1], Pos0: p0, ElemBytes: eb}, r.Blob)
		}
	} else {
		meta.Mode = "hot"
		h, hc := sess.hot, srv.slot.hot
		sh := &snapHot{Limit: hc.limit, Window: hc.window, Block: hc.block, Sinks: hc.sinks,
			TailV: h.tailV, TailP: h.tailP, Turn: h.turn, Evictions: h.evictions, Admissions: h.admissions}
		// Parked blocks are saved in extents of up to extentBlocks blocks
		// (grouped by sequence number, so unchanged extents are shared
		// between snapshots): zstd finds more to share in larger inputs.
		var ext extent
		flush := func() {
			if len(ext.members) == 0 {
				return
			}
			idx := c.add(coldstore.BlockMeta{Chain: ext.chain, Tokens: ext.toks, Pos0: ext.pos0, ElemBytes: eb}, ext.blob)
			for _, i := range ext.members {
				sh.Blocks[i].KV = idx
			}
			ext = extent{}
		}
		for _, b := range h.blocks {
			sb := snapBlock{VStart: b.vstart, N: b.n, Class: b.class, Kind: b.kind, SegID: b.segID, Pinned: b.pinned,
				Chain: b.chain, Hot: b.hot, PStart: b.pstart, Pos0: b.pos0, KV: -1, Len: -1, LastUsed: b.lastUsed,
				Score: b.score, Reason: b.reason, Retrieved: b.retrieved}
			toks := tape[b.vstart : b.vstart+b.n]
			switch {
			case b.stored:
				if len(ext.members) > 0 && b.seq/extentBlocks != ext.group {
					flush()
				}
				off := len(ext.blob)
				kv, err := srv.slot.arena.ReadKV(b.id, nil)
				if err != nil {
					b.stored = false
					h.note(fmt.Sprintf("block %d unreadable from the arena while saving: %v", b.id, err))
					break
				}
				// Each block is rewritten on its own: the extent is only
				// their concatenation.
				tm, changed := srv.cfg.Engine.BlobCodec().TokenMajor(kv)
				ext.blob = append(ext.blob, tm...)
				sb.TM = changed
				if len(ext.members) == 0 {
					ext.group, ext.pos0 = b.seq/extentBlocks, b.pos0
				}
				sb.Off, sb.Len = off, len(ext.blob)-off
				ext.chain = b.chain
				ext.toks = append(ext.toks, toks...)
				ext.members = append(ext.members, len(sh.Blocks))
			case b.cold && b.hasKey:
				sb.KV = c.addStored(b.coldKey, len(toks))
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
			if b.hot {
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
			x, err := ectx.ExtractRange(r.p, r.p+r.n)
			if err != nil {
				return nil, engineErr(err)
			}
			idx := c.add(coldstore.BlockMeta{Chain: r.chain, Tokens: r.toks, Pos0: r.p, ElemBytes: eb}, x.Blob)
			sh.Image = append(sh.Image, snapRange{PStart: r.p, N: r.n, KV: idx})
		}
		meta.Hot = sh
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

// addStored adds a block the store already holds (a spill) by its key.
func (c *snapCapture) addStored(key coldstore.Key, tokens int) int {
	c.snap.Blocks = append(c.snap.Blocks, coldstore.SnapshotBlock{Key: key, Tokens: tokens})
	return len(c.snap.Blocks) - 1
}

// write stores a capture's new blocks and commits the snapshot.
func (srv *Server) write(ctx context.Context, c *snapCapture) (*pb.SnapshotReply, error) {
	start := time.Now()
	before := srv.cold.Stats().WrittenBytes
	// Hashing, rewriting and compressing happen here, after the engine is
	// released; blocks the store already holds are not written again.
	newBlocks := 0
	for _, p := range c.pending {
		key := contentKey(c.snap.Compat, p.meta.Chain, p.meta.Pos0, p.blob)
		c.snap.Blocks[p.idx].Key = key
		if srv.cold.Has(key) {
			continue
		}
		newBlocks++
		stored := toCold(srv.cfg.Engine.BlobCodec(), p.blob)
		err := srv.cold.Enqueue(key, p.meta, stored)
		if err != nil {
			// A full queue: write this one here (the caller waits anyway).
			if err = srv.cold.Put(ctx, key, p.meta, stored); err != nil {
				return nil, coldErr(err)
			}
		}
	}
	if err := srv.cold.Flush(ctx); err != nil {
		return nil, coldErr(err)
	}
	if err := srv.cold.SaveSnapshot(ctx, c.snap); err != nil {
		if errors.Is(err, coldstore.ErrMissingBlock) {
			// Blocks that failed to write, or that the quota collected
			// before the snapshot could claim them.
			st := srv.cold.Stats()
			cause := st.Unavailable
			if cause == "" {
				cause = fmt.Sprintf("the quota of %d bytes cannot hold this snapshot's %d raw bytes", st.QuotaBytes, c.raw)
			}
			return nil, fmt.Errorf("%w: snapshot %s not saved: %s (%w)", protocol.ErrResourceExhausted, c.snap.Name, cause, err)
		}
		return nil, coldErr(err)
	}
	written := srv.cold.Stats().WrittenBytes - before
	srv.metrics.ObserveColdWrite(int(written), time.Since(start))
	srv.snapMu.Lock()
	srv.snaps[c.snap.Name] = &snapEntry{name: c.snap.Name, created: c.snap.Created, compat: c.snap.Compat, mode: c.mode, tape: c.tape}
	srv.snapMu.Unlock()
	return &pb.SnapshotReply{
		Name: c.snap.Name, Tokens: int64(len(c.tape)), Blocks: int32(len(c.snap.Blocks)), NewBlocks: int32(newBlocks),
		RawBytes: c.raw, CompressedBytes: written, ElapsedUs: time.Since(start).Microseconds(),
	}, nil
}

// snapshot serves SnapshotRequest: capture under the token, then write.
// Session 0 names the most recently used session; any allowed peer may
// snapshot any session (nothing in it changes).
func (srv *Server) snapshot(ctx context.Context, r *pb.SnapshotRequest) (*pb.SnapshotReply, error) {
	if srv.cold == nil {
		return nil, fmt.Errorf("%w: the SSD tier is off: %s", protocol.ErrResourceExhausted, srv.coldOff)
	}
	if !validSnapName(r.GetName()) {
		return nil, fmt.Errorf("%w: snapshot name %q: use 1-128 of A-Z a-z 0-9 . _ -", protocol.ErrInvalidArgument, r.GetName())
	}
	sess, err := srv.anySession(r.GetSessionId())
	if err != nil {
		return nil, err
	}
	c, err := srv.captureSession(ctx, sess, r.GetName())
	if err != nil {
		return nil, err
	}
	rep, err := srv.write(ctx, c)
	if err != nil {
		return nil, err
	}
	rep.SessionId = sess.id
	srv.log.Info("snapshot saved", "name", rep.Name, "session", sess.id, "tokens", rep.Tokens, "blocks", rep.Blocks, "new_blocks", rep.NewBlocks, "ms", rep.ElapsedUs/1000)
	return rep, nil
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

var snapNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

func validSnapName(s string) bool { return snapNameRE.MatchString(s) && s != "." && s != ".." }

// anySession finds session id (0: the most recently used) for any caller.
func (srv *Server) anySession(id uint64) (*session, error) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if id == 0 {
		id = srv.lastSession
		if _, ok := srv.sessions[id]; !ok {
			// The last used session is gone: the most recently used open one.
			var best *session
			for _, s := range srv.sessions {
				if best == nil || s.lastUsed.After(best.lastUsed) {
					best = s
				}
			}
			if best == nil {
				return nil, fmt.Errorf("%w: no open session", protocol.ErrNotFound)
			}
			return best, nil
		}
	}
	sess, ok := srv.sessions[id]
	if !ok {
		return nil, fmt.Errorf("%w: session %d", protocol.ErrNotFound, id)
	}
	return sess, nil
}

// restore serves RestoreRequest: the caller's session takes the
// snapshot's state.
func (srv *Server) restore(ctx context.Context, connID uint64, r *pb.RestoreRequest) (*pb.RestoreReply, error) {
	if srv.cold == nil {
		return nil, fmt.Errorf("%w: the SSD tier is off: %s", protocol.ErrResourceExhausted, srv.coldOff)
	}
	snap, meta, err := srv.loadSnap(ctx, r.GetName())
	if err != nil {
		return nil, err
	}
	var rep *pb.RestoreReport
	err = srv.withSession(ctx, connID, r.GetSessionId(), func(sess *session) error {
		tape, err := decodeTape(meta.Tape)
		if err != nil {
			return fmt.Errorf("%w: snapshot %s: %w", protocol.ErrInternal, snap.Name, err)
		}
		rep, err = srv.restoreInto(ctx, sess, snap, meta, tape, len(tape))
		return err
	})
	if err != nil {
		return nil, err
	}
	srv.log.Info("snapshot restored", "name", snap.Name, "session", r.GetSessionId(), "tokens", rep.Tokens, "restored_blocks", rep.RestoredBlocks, "recomputed_blocks", rep.RecomputedBlocks, "ms", rep.ElapsedUs/1000)
	return &pb.RestoreReply{Report: rep}, nil
}

// loadSnap reads a snapshot and checks it fits the loaded model.
func (srv *Server) loadSnap(ctx context.Context, name string) (coldstore.Snapshot, snapMeta, error) {
	var meta snapMeta
	snap, err := srv.cold.LoadSnapshot(ctx, name)
	if err != nil {
		return snap, meta, coldErr(err)
	}
	if err := json.Unmarshal(snap.Meta, &meta); err != nil || meta.Format != snapFormat {
		return snap, meta, fmt.Errorf("%w: snapshot %s has unreadable metadata (format %d): %v", protocol.ErrIncompatible, name, meta.Format, err)
	}
	if srv.slot.model == nil {
		return snap, meta, protocol.ErrNoModel
	}
	if want := srv.coldCompat(); snap.Compat != want {
		return snap, meta, fmt.Errorf("%w: snapshot %s was saved for model %.12s with KV %s (flash attention %v, %s); loaded: model %.12s, KV %s (flash attention %v, %s)",
			protocol.ErrIncompatible, name, snap.Compat.ModelDigest, snap.Compat.KVType, snap.Compat.FlashAttention, snap.Compat.Settings,
			want.ModelDigest, want.KVType, want.FlashAttention, want.Settings)
	}
	return snap, meta, nil
}

// restoreInto replaces sess's state with the snapshot's, bringing back at
// least the first upto tokens. The caller holds the slot token and sess is
// resident.
func (srv *Server) restoreInto(ctx context.Context, sess *session, snap coldstore.Snapshot, meta snapMeta, tape []engine.Token, upto int) (*pb.RestoreReport, error) {
	start := time.Now()
	hotMode := srv.slot.hot.budget > 0
	if (meta.Mode == "hot") != hotMode {
		return nil, fmt.Errorf("%w: snapshot %s holds a %s session; this server runs %s sessions", protocol.ErrIncompatible, snap.Name, meta.Mode, modeName(hotMode))
	}
	var m *policy.Manifest
	if len(snap.Manifest) > 0 {
		var w pb.Manifest
		if err := proto.Unmarshal(snap.Manifest, &w); err != nil {
			return nil, fmt.Errorf("%w: snapshot %s: manifest: %w", protocol.ErrIncompatible, snap.Name, err)
		}
		mm := protocol.ManifestFromWire(&w)
		m = &mm
	}
	var spans []span
	for _, s := range meta.Spans {
		spans = append(spans, span{seg: s.Seg, start: s.Start, end: s.End, generated: s.Generated})
	}
	f := srv.slot.fig
	rep := &pb.RestoreReport{Snapshot: snap.Name, PrefillTokensPerS: f.prefillTokensPerSec, DecompressBytesPerS: f.decompressBPS(), ReadBytesPerS: f.readBPS}
	readBefore := srv.cold.Stats().ReadBytes
	var err error
	if hotMode {
		err = srv.restoreHot(ctx, sess, snap, meta, tape, spans, rep)
	} else {
		err = srv.restoreDense(ctx, sess, snap, tape, spans, upto, rep)
	}
	if err != nil {
		return nil, err
	}
	sess.manifest, sess.compat = m, srv.compatKey(meta.Template)
	sess.logitsAt = -1
	rep.Tokens = int64(len(sess.tape))
	rep.CompressedBytes = srv.cold.Stats().ReadBytes - readBefore
	rep.ElapsedUs = time.Since(start).Microseconds()
	if secs := time.Since(start).Seconds(); rep.CompressedBytes > 0 && secs > 0 {
		// A running estimate of what the SSD tier delivers.
		bps := float64(rep.CompressedBytes) / secs
		srv.slot.fig.readBPS = 0.5*srv.slot.fig.readBPS + 0.5*max(bps, 1e6)
	}
	sess.lastRestore = rep
	return rep, nil
}

func modeName(hot bool) string {
	if hot {
		return "hot"
	}
	return "dense"
}

// fetched is one block read from the SSD tier.
type fetched struct {
	blob []byte
	err  error
}

// fetchAll reads keys in order in the background, a few blocks ahead of
// the consumer, so decompression overlaps engine inserts.
func (srv *Server) fetchAll(ctx context.Context, keys []coldstore.Key) (<-chan fetched, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan fetched, 4)
	go func() {
		defer close(out)
		for _, k := range keys {
			blob, err := srv.coldGet(ctx, k, 0)
			select {
			case out <- fetched{blob, err}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, cancel
}

// clearOrLog clears sess after a failed resume; a failure to clear is
// logged and the session's tape reset, so the next sync prefills.
func (srv *Server) clearOrLog(sess *session) {
	if err := srv.clearSession(sess); err != nil {
		srv.log.Warn("clearing a session after a failed resume", "session", sess.id, "err", err)
		srv.slot.ectx.Clear()
		sess.resetTape()
		if sess.hot != nil {
			sess.hot = newHotState()
		}
	}
}

// clearSession empties sess (resident) in the engine and the arena.
func (srv *Server) clearSession(sess *session) error {
	if sess.hot != nil {
		for _, b := range sess.hot.blocks {
			if b.stored && srv.slot.arena != nil {
				srv.slot.deleteBlock(b.id)
			}
			srv.dropCold(b)
		}
	}
	if _, err := srv.slot.ectx.Remove(0, -1); err != nil {
		return engineErr(err)
	}
	sess.resetTape()
	if sess.hot != nil {
		sess.hot = newHotState()
	}
	return nil
}

func (srv *Server) restoreDense(ctx context.Context, sess *session, snap coldstore.Snapshot, tape []engine.Token, spans []span, upto int, rep *pb.RestoreReport) error {
	if len(tape) > srv.slot.contextTokens() {
		return protocol.OverflowError{PromptTokens: int64(len(tape)), ContextTokens: int64(srv.slot.contextTokens())}
	}
	if err := srv.clearSession(sess); err != nil {
		return err
	}
	upto = min(upto, len(tape))
	// Which blocks come back from the SSD: policy.PlanRestore weighs
	// reading them against prefilling them; the rest is prefilled.
	f := srv.slot.fig
	in := policy.RestoreInput{UptoTokens: upto, KVBytesPerToken: srv.slot.facts.KVBytesPerToken(srv.cfg.KVType),
		ReadBytesPerSec: f.readBPS, DecompressBytesPerSec: f.decompressBPS(), PrefillTokensPerSec: f.prefillTokensPerSec}
	for _, b := range snap.Blocks {
		in.BlockTokens = append(in.BlockTokens, b.Tokens)
	}
	plan := policy.PlanRestore(in)
	rep.Choice = plan.Choice
	keys := make([]coldstore.Key, plan.Blocks)
	for i := range keys {
		keys[i] = snap.Blocks[i].Key
	}
	ch, cancel := srv.fetchAll(ctx, keys)
	defer cancel()
	pos := 0
	for i := range keys {
		reportProgress(ctx, "restore", i, len(keys))
		fb := <-ch
		n := snap.Blocks[i].Tokens
		if fb.err == nil {
			fb.err = srv.slot.ectx.InsertRange(engine.Range{Pos0: pos, Count: n, Blob: fb.blob}, pos)
		}
		if fb.err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%w: %w", protocol.ErrCancelled, ctx.Err())
			}
			rep.Choice = fmt.Sprintf("block %d unusable (%v): recomputed from token %d", i, fb.err, pos)
			break
		}
		sess.tape = append(sess.tape, tape[pos:pos+n]...)
		pos += n
		rep.RestoredBlocks++
		rep.RestoredTokens += int64(n)
	}
	cancel()
	if pos < upto {
		target := prompt{tokens: tape[:upto], spans: clipSpans(spans, upto)}
		if err := srv.prefill(ctx, sess, target, pos); err != nil {
			return err
		}
		rep.RecomputedTokens = int64(upto - pos)
		rep.RecomputedBlocks = int64((upto - pos + denseBlockTokens - 1) / denseBlockTokens)
	}
	sess.spans = clipSpans(spans, len(sess.tape))
	return nil
}

func (srv *Server) restoreHot(ctx context.Context, sess *session, snap coldstore.Snapshot, meta snapMeta, tape []engine.Token, spans []span, rep *pb.RestoreReport) error {
	sh, hc := meta.Hot, srv.slot.hot
	if sh == nil || sh.Limit != hc.limit || sh.Window != hc.window || sh.Block != hc.block || sh.Sinks != hc.sinks {
		return fmt.Errorf("%w: snapshot %s was saved with a different hot set (limit/window/block/sinks); restart ctxd with the settings it was saved under", protocol.ErrIncompatible, snap.Name)
	}
	for _, b := range sh.Blocks {
		if b.VStart < 0 || b.N <= 0 || b.VStart+b.N > len(tape) || b.KV >= len(snap.Blocks) {
			return fmt.Errorf("%w: snapshot %s: block at %d+%d outside its tape of %d", protocol.ErrIncompatible, snap.Name, b.VStart, b.N, len(tape))
		}
	}
	if err := srv.clearSession(sess); err != nil {
		return err
	}
	rep.Choice = "restore: a hot-set session's parked blocks were computed against their own hot set; only their saved bytes reproduce it"
	// Blobs in order of first use: an extent serves several blocks.
	var keys []coldstore.Key
	last := -1
	for _, b := range sh.Blocks {
		if b.KV >= 0 && b.KV != last {
			keys = append(keys, snap.Blocks[b.KV].Key)
			last = b.KV
		}
	}
	for _, r := range sh.Image {
		keys = append(keys, snap.Blocks[r.KV].Key)
	}
	ch, cancel := srv.fetchAll(ctx, keys)
	defer cancel()
	cur, curIdx := fetched{}, -1
	h := sess.hot
	h.turn, h.evictions, h.admissions = sh.Turn, sh.Evictions, sh.Admissions
	for k, sb := range sh.Blocks {
		reportProgress(ctx, "restore", k, len(sh.Blocks))
		toks := tape[sb.VStart : sb.VStart+sb.N]
		b := &hotBlock{id: srv.newBlockID(), seq: len(h.blocks), vstart: sb.VStart, n: sb.N, class: sb.Class, kind: sb.Kind,
			segID: sb.SegID, pinned: sb.Pinned, chain: sb.Chain, hot: sb.Hot, pstart: sb.PStart, pos0: sb.Pos0,
			lastUsed: sb.LastUsed, score: sb.Score, reason: sb.Reason, retrieved: sb.Retrieved}
		if sb.KV >= 0 {
			if sb.KV != curIdx {
				cur, curIdx = <-ch, sb.KV
			}
			fb := cur
			if fb.err == nil {
				blob := fb.blob
				if sb.Len >= 0 {
					if sb.Off < 0 || sb.Off+sb.Len > len(blob) {
						fb.err = fmt.Errorf("block bytes [%d,+%d) outside its blob of %d", sb.Off, sb.Len, len(blob))
					} else {
						blob = blob[sb.Off : sb.Off+sb.Len]
						if sb.TM {
							blob, fb.err = srv.cfg.Engine.BlobCodec().FromTokenMajor(blob)
						}
					}
				} else {
					b.coldKey, b.hasKey = snap.Blocks[sb.KV].Key, true // a spilled block: its own blob
				}
				if fb.err == nil {
					b.stored = srv.arenaPut(sess, b, toks, blob)
					rep.RestoredBlocks++
					rep.RestoredTokens += int64(sb.N)
				}
			}
			if fb.err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("%w: %w", protocol.ErrCancelled, ctx.Err())
				}
				h.note(fmt.Sprintf("block %d (tokens %d..%d) not restored: %v", b.id, b.vstart, b.vstart+b.n, fb.err))
			}
		}
		h.index.Add(b.id, toks)
		h.blocks = append(h.blocks, b)
	}
	for _, r := range sh.Image {
		fb := <-ch
		if fb.err == nil {
			fb.err = srv.slot.ectx.InsertRange(engine.Range{Pos0: r.PStart, Count: r.N, Blob: fb.blob}, r.PStart)
		}
		if fb.err != nil {
			// Without the engine image the hot set cannot be rebuilt
			// exactly: leave the session empty rather than inconsistent.
			srv.clearOrLog(sess)
			return fmt.Errorf("%w: snapshot %s: hot range at %d: %w", protocol.ErrInternal, snap.Name, r.PStart, fb.err)
		}
	}
	sess.tape = append(sess.tape[:0], tape...)
	sess.spans = clipSpans(spans, len(tape))
	h.tailV, h.tailP = sh.TailV, sh.TailP
	return nil
}

// resume looks for the stored snapshot sharing the longest token prefix
// with target and restores it into the empty session sess. It returns the
// snapshot's name and the tokens that came back, or "" when none fits.
// The caller holds the slot token and sess is resident.
func (srv *Server) resume(ctx context.Context, sess *session, target []engine.Token) (string, int) {
	if sess.cold || len(sess.tape) > 0 {
		return "", 0
	}
	// policy.ChooseResume picks the source; resume stops at target's own
	// tokens (choice.Tokens), whatever the source holds past them.
	in := policy.ResumeInput{TargetTokens: len(target), MinTokens: minAutoSnapshotTokens}
	hotMode := srv.slot.hot.budget > 0
	if hotMode && sess.hot != nil {
		for _, t := range srv.slot.orphans {
			in.Arena = append(in.Arena, commonPrefix(t.tokens, target))
		}
	}
	compat, mode := srv.coldCompat(), modeName(hotMode)
	var snaps []*snapEntry
	if srv.cold != nil {
		srv.snapMu.Lock()
		for _, e := range srv.snaps {
			if e.compat == compat && e.mode == mode {
				snaps = append(snaps, e)
			}
		}
		srv.snapMu.Unlock()
		slices.SortFunc(snaps, func(a, b *snapEntry) int { return strings.Compare(a.name, b.name) }) // ties: by name
		for _, e := range snaps {
			in.Snapshots = append(in.Snapshots, policy.ResumeCandidate{CommonTokens: commonPrefix(e.tape, target), Created: e.created.UnixNano()})
		}
	}
	choice := policy.ChooseResume(in)
	switch choice.Source {
	case policy.ResumeArena:
		oi, on := choice.Index, choice.Tokens
		// Blocks still in host RAM beat the SSD.
		n, err := srv.adoptOrphan(ctx, sess, oi)
		if err == nil {
			// The orphan may go on past target (tokens its session
			// generated): keep only what target shares with it.
			err = srv.truncateTo(sess, on)
			n = len(sess.tape)
		}
		if err != nil {
			srv.log.Warn("resume from the arena failed; prefilling instead", "err", err)
			srv.clearOrLog(sess)
			return "", 0
		}
		sess.lastRestore = &pb.RestoreReport{Snapshot: "arena", Tokens: int64(n), RestoredTokens: int64(n), RestoredBlocks: int64(len(sess.hot.blocks)),
			Automatic: true, Choice: "resume from parked blocks still in the host-RAM arena (no SSD read, no prefill)"}
		srv.log.Info("session resumed from the arena", "session", sess.id, "common_tokens", on, "tokens", n)
		return "arena", min(on, n)
	case policy.ResumeSnapshot:
	default:
		return "", 0
	}
	best, bestN := snaps[choice.Index], choice.Tokens
	snap, meta, err := srv.loadSnap(ctx, best.name)
	if err != nil {
		srv.log.Warn("resume: snapshot unusable", "name", best.name, "err", err)
		return "", 0
	}
	tape, err := decodeTape(meta.Tape)
	if err != nil {
		return "", 0
	}
	rep, err := srv.restoreInto(ctx, sess, snap, meta, tape, bestN)
	if err == nil {
		// The snapshot may go on past target (tokens its session
		// generated, or another suffix): resume only the common prefix.
		err = srv.truncateTo(sess, bestN)
		rep.Tokens = int64(len(sess.tape))
	}
	if err != nil {
		srv.log.Warn("resume failed; prefilling instead", "name", best.name, "err", err)
		srv.clearOrLog(sess)
		return "", 0
	}
	rep.Automatic = true
	srv.log.Info("session resumed from snapshot", "session", sess.id, "snapshot", best.name, "common_tokens", bestN, "restored_tokens", rep.RestoredTokens, "ms", rep.ElapsedUs/1000)
	return best.name, min(bestN, len(sess.tape))
}

// loadSnapIndex reads every stored snapshot's tape for resume matching.
func (srv *Server) loadSnapIndex(ctx context.Context) {
	if srv.cold == nil {
		return
	}
	infos, err := srv.cold.Snapshots(ctx)
	if err != nil {
		srv.log.Warn("SSD tier: listing snapshots", "err", err)
		return
	}
	idx := map[string]*snapEntry{}
	for _, in := range infos {
		e := &snapEntry{name: in.Name, created: in.Created, compat: in.Compat}
		if snap, err := srv.cold.LoadSnapshot(ctx, in.Name); err == nil {
			var meta snapMeta
			if json.Unmarshal(snap.Meta, &meta) == nil && meta.Format == snapFormat {
				e.mode = meta.Mode
				e.tape, _ = decodeTape(meta.Tape)
			}
		} else {
			srv.log.Warn("SSD tier: snapshot skipped", "name", in.Name, "err", err)
			continue
		}
		idx[in.Name] = e
	}
	srv.snapMu.Lock()
	srv.snaps = idx
	srv.snapMu.Unlock()
}

// autoName is the name of a session's automatic snapshot.
func autoName(sess *session) string {
	if sess.name != "" {
		var b strings.Builder
		for _, r := range sess.name {
			if r < 128 && (r == '.' || r == '_' || r == '-' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')) {
				b.WriteRune(r)
			} else {
				b.WriteByte('_')
			}
		}
		return truncate("auto-"+b.String(), 128)
	}
	return fmt.Sprintf("auto-%d-s%d", time.Now().UnixMilli(), sess.id)
}

// autoSnapshot captures sess for an automatic snapshot when it changed
// since the last one; the write continues in the background. The caller
// holds the slot token.
func (srv *Server) autoSnapshot(sess *session, why string) {
	if srv.cold == nil || srv.cold.Err() != nil || sess.closed || sess.cold || len(sess.tape) < minAutoSnapshotTokens || sess.version == sess.savedVersion {
		return
	}
	if err := srv.slot.makeResident(sess); err != nil {
		return
	}
	c, err := srv.capture(sess, autoName(sess))
	if err != nil {
		srv.log.Warn("automatic snapshot not taken", "session", sess.id, "why", why, "err", err)
		return
	}
	sess.savedVersion = sess.version
	srv.snapWG.Add(1)
	go func() {
		defer srv.snapWG.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		rep, err := srv.write(ctx, c)
		if err != nil {
			srv.log.Warn("automatic snapshot failed; the session's state stays in memory only", "name", c.snap.Name, "why", why, "err", err)
			return
		}
		srv.log.Info("automatic snapshot", "name", rep.Name, "why", why, "tokens", rep.Tokens, "new_blocks", rep.NewBlocks, "ms", rep.ElapsedUs/1000)
		srv.pruneAuto(ctx)
	}()
}

// pruneAuto keeps the newest AutoSnapshots automatic snapshots.
func (srv *Server) pruneAuto(ctx context.Context) {
	keep := srv.cfg.AutoSnapshots
	srv.snapMu.Lock()
	var autos []*snapEntry
	for _, e := range srv.snaps {
		if strings.HasPrefix(e.name, "auto-") {
			autos = append(autos, e)
		}
	}
	srv.snapMu.Unlock()
	if len(autos) <= keep {
		return
	}
	sort.Slice(autos, func(i, j int) bool { return autos[i].created.After(autos[j].created) })
	for _, e := range autos[keep:] {
		if err := srv.deleteSnap(ctx, e.name); err != nil {
			srv.log.Warn("pruning automatic snapshot", "name", e.name, "err", err)
		}
	}
}

func (srv *Server) deleteSnap(ctx context.Context, name string) error {
	if err := srv.cold.DeleteSnapshot(ctx, name); err != nil {
		return coldErr(err)
	}
	srv.snapMu.Lock()
	delete(srv.snaps, name)
	srv.snapMu.Unlock()
	return nil
}

// idleSnapshots saves sessions idle for IdleSnapshot until ctx ends.
func (srv *Server) idleSnapshots(ctx context.Context) {
	idle := srv.cfg.IdleSnapshot
	if srv.cold == nil || idle <= 0 {
		return
	}
	t := time.NewTicker(max(idle/4, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		srv.mu.Lock()
		var due []*session
		for _, s := range srv.sessions {
			due = append(due, s)
		}
		srv.mu.Unlock()
		for _, sess := range due {
			srv.mu.Lock()
			idleFor := time.Since(sess.lastUsed)
			srv.mu.Unlock()
			if idleFor < idle {
				continue
			}
			// Only when the engine is free: never delay a client's call.
			if !srv.slot.token.tryAcquire() {
				continue
			}
			if srv.slot.model != nil {
				srv.autoSnapshot(sess, "idle")
			}
			srv.slot.release()
		}
	}
}

// listSnapshots serves ListSnapshotsRequest.
func (srv *Server) listSnapshots(ctx context.Context) (*pb.ListSnapshotsReply, error) {
	if srv.cold == nil {
		return &pb.ListSnapshotsReply{Cold: srv.coldStatus()}, nil
	}
	infos, err := srv.cold.Snapshots(ctx)
	if err != nil {
		return nil, coldErr(err)
	}
	compat := srv.slot.view.Load().compat // never waits for the engine
	rep := &pb.ListSnapshotsReply{Cold: srv.coldStatus()}
	for _, in := range infos {
		si := &pb.SnapshotInfo{Name: in.Name, CreatedUnixMs: in.Created.UnixMilli(), Tokens: int64(in.Tokens), Blocks: int32(in.Blocks),
			Bytes: in.Bytes, ModelDigest: in.Compat.ModelDigest, KvType: in.Compat.KVType, Compatible: in.Compat == compat}
		srv.snapMu.Lock()
		if e := srv.snaps[in.Name]; e != nil {
			si.Mode = e.mode
			si.Tokens = int64(len(e.tape))
		}
		srv.snapMu.Unlock()
		rep.Snapshots = append(rep.Snapshots, si)
	}
	return rep, nil
}

// verifyCold serves VerifyColdRequest.
func (srv *Server) verifyCold(ctx context.Context) (*pb.VerifyColdReply, error) {
	if srv.cold == nil {
		return nil, fmt.Errorf("%w: the SSD tier is off: %s", protocol.ErrResourceExhausted, srv.coldOff)
	}
	probs, err := srv.cold.Verify(ctx)
	if err != nil {
		return nil, coldErr(err)
	}
	st := srv.cold.Stats()
	rep := &pb.VerifyColdReply{BlocksChecked: int64(st.Blocks)}
	srv.snapMu.Lock()
	rep.SnapshotsChecked = int32(len(srv.snaps))
	srv.snapMu.Unlock()
	for _, p := range probs {
		e := ""
		if p.Err != nil {
			e = p.Err.Error()
		}
		rep.Problems = append(rep.Problems, &pb.ColdProblem{Path: p.Path, Kind: p.Kind, Error: e})
	}
	return rep, nil
}

// deleteSnapshot serves DeleteSnapshotRequest.
func (srv *Server) deleteSnapshot(ctx context.Context, name string) error {
	if srv.cold == nil {
		return fmt.Errorf("%w: the SSD tier is off: %s", protocol.ErrResourceExhausted, srv.coldOff)
	}
	return srv.deleteSnap(ctx, name)
}
