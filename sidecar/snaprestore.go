package sidecar

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar/internal/snapshot"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Restore: a session takes a snapshot's state. A restore reproduces the
// saved engine state byte for byte; both the saved and the restored
// session recompute the last token's logits, so they continue alike.

// snapRestore is a snapshot being restored.
type snapRestore struct {
	snap  coldstore.Snapshot
	meta  snapshot.Meta
	tape  []engine.Token
	spans []span
	rep   *pb.RestoreReport
}

// restoreInto replaces sess's state with the snapshot's, bringing back at
// least the first upto tokens. The caller holds the slot token and sess is
// resident.
func (srv *Server) restoreInto(ctx context.Context, sess *session, snap coldstore.Snapshot, meta snapshot.Meta, tape []engine.Token, upto int) (*pb.RestoreReport, error) {
	start := time.Now()
	if mode := sess.layout.mode(); meta.Mode != mode {
		return nil, fmt.Errorf("%w: snapshot %s holds a %s session; this server runs %s sessions", protocol.ErrIncompatible, snap.Name, meta.Mode, mode)
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
	r := snapRestore{snap: snap, meta: meta, tape: tape}
	for _, s := range meta.Spans {
		r.spans = append(r.spans, span{seg: s.Seg, start: s.Start, end: s.End, generated: s.Generated})
	}
	f := &srv.slot.fig
	r.rep = &pb.RestoreReport{Snapshot: snap.Name, PrefillTokensPerS: f.prefillTokensPerSec, DecompressBytesPerS: f.decompressBPS(), ReadBytesPerS: f.readBPS}
	ssd := srv.tiers.SSD()
	readBefore := ssd.Stats().ReadBytes
	if err := sess.layout.restore(ctx, r, upto); err != nil {
		return nil, err
	}
	rep := r.rep
	sess.manifest, sess.compat = m, srv.compatKey(meta.Template)
	sess.logitsAt = -1
	rep.Tokens = int64(len(sess.tape))
	rep.CompressedBytes = ssd.Stats().ReadBytes - readBefore
	rep.ElapsedUs = time.Since(start).Microseconds()
	if secs := time.Since(start).Seconds(); rep.CompressedBytes > 0 && secs > 0 {
		// A running estimate of what the SSD tier delivers.
		bps := float64(rep.CompressedBytes) / secs
		f.readBPS = 0.5*f.readBPS + 0.5*max(bps, 1e6)
	}
	sess.lastRestore = rep
	return rep, nil
}

// restore reads blocks back in order while that is cheaper than
// recomputing them, and prefills the rest.
func (d *denseLayout) restore(ctx context.Context, r snapRestore, upto int) error {
	sess, snap, tape, rep := d.sess, r.snap, r.tape, r.rep
	if len(tape) > d.env.contextTokens {
		return protocol.OverflowError{PromptTokens: int64(len(tape)), ContextTokens: int64(d.env.contextTokens)}
	}
	if err := d.clear(); err != nil {
		return err
	}
	upto = min(upto, len(tape))
	// Which blocks come back from the SSD: policy.PlanRestore weighs
	// reading them against prefilling them; the rest is prefilled.
	f := d.env.fig
	in := policy.RestoreInput{UptoTokens: upto, KVBytesPerToken: d.env.kvBytesPerToken,
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
	ch, cancel := d.env.tiers.FetchAll(ctx, keys)
	defer cancel()
	pos := 0
	for i := range keys {
		reportProgress(ctx, "restore", i, len(keys))
		fb := <-ch
		n := snap.Blocks[i].Tokens
		if fb.Err == nil {
			fb.Err = d.env.ectx.InsertRange(engine.Range{Pos0: pos, Count: n, Blob: fb.Blob}, pos)
		}
		if fb.Err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%w: %w", protocol.ErrCancelled, ctx.Err())
			}
			rep.Choice = fmt.Sprintf("block %d unusable (%v): recomputed from token %d", i, fb.Err, pos)
			break
		}
		sess.tape = append(sess.tape, tape[pos:pos+n]...)
		pos += n
		rep.RestoredBlocks++
		rep.RestoredTokens += int64(n)
	}
	cancel()
	if pos < upto {
		target := prompt{tokens: tape[:upto], spans: clipSpans(r.spans, upto)}
		if err := d.prefill(ctx, target, pos); err != nil {
			return err
		}
		rep.RecomputedTokens = int64(upto - pos)
		rep.RecomputedBlocks = int64((upto - pos + snapshot.DenseBlockTokens - 1) / snapshot.DenseBlockTokens)
	}
	sess.spans = clipSpans(r.spans, len(sess.tape))
	return nil
}

// restore brings every saved block back as it was (parked blocks into
// the arena) and the engine's image at its positions: a hot set's blocks
// were computed against their own hot set, so only their saved bytes
// reproduce it.
func (h *hotSet) restore(ctx context.Context, r snapRestore, _ int) error {
	sess, snap, tape, rep := h.sess, r.snap, r.tape, r.rep
	sh, hc := r.meta.Hot, h.env.hot
	if sh == nil || sh.Limit != hc.limit || sh.Window != hc.window || sh.Block != hc.block || sh.Sinks != hc.sinks {
		return fmt.Errorf("%w: snapshot %s was saved with a different hot set (limit/window/block/sinks); restart ctxd with the settings it was saved under", protocol.ErrIncompatible, snap.Name)
	}
	for _, b := range sh.Blocks {
		if b.VStart < 0 || b.N <= 0 || b.VStart+b.N > len(tape) || b.KV >= len(snap.Blocks) {
			return fmt.Errorf("%w: snapshot %s: block at %d+%d outside its tape of %d", protocol.ErrIncompatible, snap.Name, b.VStart, b.N, len(tape))
		}
	}
	if err := h.clear(); err != nil {
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
	for _, ir := range sh.Image {
		keys = append(keys, snap.Blocks[ir.KV].Key)
	}
	ch, cancel := h.env.tiers.FetchAll(ctx, keys)
	defer cancel()
	cur, curIdx := tiers.Fetched{}, -1
	h.turn, h.evictions, h.admissions = sh.Turn, sh.Evictions, sh.Admissions
	for k, sb := range sh.Blocks {
		reportProgress(ctx, "restore", k, len(sh.Blocks))
		toks := tape[sb.VStart : sb.VStart+sb.N]
		b := &hotBlock{id: h.env.newBlockID(), seq: len(h.blocks), vstart: sb.VStart, n: sb.N, class: sb.Class, kind: sb.Kind,
			segID: sb.SegID, pinned: sb.Pinned, chain: sb.Chain, res: residencyOf(sb.Hot, tiers.None), pstart: sb.PStart, pos0: sb.Pos0,
			lastUsed: sb.LastUsed, score: sb.Score, reason: sb.Reason, retrieved: sb.Retrieved}
		if sb.KV >= 0 {
			if sb.KV != curIdx {
				cur, curIdx = <-ch, sb.KV
			}
			fb := cur
			if fb.Err == nil {
				blob := fb.Blob
				if sb.Len >= 0 {
					if sb.Off < 0 || sb.Off+sb.Len > len(blob) {
						fb.Err = fmt.Errorf("block bytes [%d,+%d) outside its blob of %d", sb.Off, sb.Len, len(blob))
					} else {
						blob = blob[sb.Off : sb.Off+sb.Len]
					}
				} else {
					b.ssdKey = snap.Blocks[sb.KV].Key // a spilled block: its own blob
				}
				if fb.Err == nil {
					if h.park(ctx, b, toks, blob) {
						b.res = b.res.withCopy(tiers.Arena)
					}
					rep.RestoredBlocks++
					rep.RestoredTokens += int64(sb.N)
				}
			}
			if fb.Err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("%w: %w", protocol.ErrCancelled, ctx.Err())
				}
				h.note(fmt.Sprintf("block %d (tokens %d..%d) not restored: %v", b.id, b.vstart, b.vstart+b.n, fb.Err))
			}
		}
		h.index.Add(b.id, toks)
		h.blocks = append(h.blocks, b)
	}
	for _, ir := range sh.Image {
		fb := <-ch
		if fb.Err == nil {
			fb.Err = h.env.ectx.InsertRange(engine.Range{Pos0: ir.PStart, Count: ir.N, Blob: fb.Blob}, ir.PStart)
		}
		if fb.Err != nil {
			// Without the engine image the hot set cannot be rebuilt
			// exactly: leave the session empty rather than inconsistent.
			if err := h.clear(); err != nil {
				h.env.ectx.Clear()
				h.reset()
			}
			return fmt.Errorf("%w: snapshot %s: hot range at %d: %w", protocol.ErrInternal, snap.Name, ir.PStart, fb.Err)
		}
	}
	sess.tape = append(sess.tape[:0], tape...)
	sess.spans = clipSpans(r.spans, len(tape))
	h.tailV, h.tailP = sh.TailV, sh.TailP
	return nil
}
