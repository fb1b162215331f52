package layout

import (
	"context"
	"fmt"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar/internal/snapshot"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Restore is a snapshot being restored into a session.
type Restore struct {
	Snap   coldstore.Snapshot
	Meta   snapshot.Meta
	Tokens []engine.Token // the snapshot's saved
	Spans  []Span
	Report *pb.RestoreReport // filled in as blocks come back
	// More asks a dense restore to go on reading blocks past upto up to
	// token More while reading is cheaper than prefill, never prefilling
	// past upto (a resume's unchanged segments past the first change,
	// which the next sync moves into place); 0: nothing past upto.
	More int
}

// Restore reads blocks back in order while that is cheaper than
// recomputing them, and prefills the rest.
func (d *denseLayout) Restore(ctx context.Context, r Restore, upto int) error {
	tape, snap, saved, rep := d.tape, r.Snap, r.Tokens, r.Report
	if len(saved) > d.env.ContextTokens {
		return protocol.OverflowError{PromptTokens: int64(len(saved)), ContextTokens: int64(d.env.ContextTokens)}
	}
	if err := d.Clear(); err != nil {
		return err
	}
	upto = min(upto, len(saved))
	// Which blocks come back from the SSD: policy.PlanRestore weighs
	// reading them against prefilling them; the rest up to upto is
	// prefilled (past it, up to r.More, only what is read comes back).
	readBPS, decompressBPS, prefillTPS := d.env.RestoreRates()
	in := policy.RestoreInput{UptoTokens: min(max(upto, r.More), len(saved)), KVBytesPerToken: d.env.KVBytesPerToken,
		ReadBytesPerSec: readBPS, DecompressBytesPerSec: decompressBPS, PrefillTokensPerSec: prefillTPS}
	for _, b := range snap.Blocks {
		in.BlockTokens = append(in.BlockTokens, b.Tokens)
	}
	plan := policy.PlanRestore(in)
	rep.Choice = plan.Choice
	keys := make([]coldstore.Key, plan.Blocks)
	for i := range keys {
		keys[i] = snap.Blocks[i].Key
	}
	ch, cancel := d.env.Tiers.FetchAll(ctx, keys)
	defer cancel()
	pos := 0
	for i := range keys {
		d.env.Progress(ctx, "restore", i, len(keys))
		fb := <-ch
		n := snap.Blocks[i].Tokens
		if fb.Err == nil {
			fb.Err = d.env.Engine.InsertRange(engine.Range{Pos0: pos, Count: n, Blob: fb.Blob}, pos)
		}
		if fb.Err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%w: %w", protocol.ErrCancelled, ctx.Err())
			}
			rep.Choice = fmt.Sprintf("block %d unusable (%v): recomputed from token %d", i, fb.Err, pos)
			break
		}
		tape.tokens = append(tape.tokens, saved[pos:pos+n]...)
		pos += n
		rep.RestoredBlocks++
		rep.RestoredTokens += int64(n)
	}
	cancel()
	if pos < upto {
		target := Prompt{Tokens: saved[:upto], Spans: ClipSpans(r.Spans, upto)}
		if err := d.prefill(ctx, target, pos, upto); err != nil {
			return err
		}
		rep.RecomputedTokens = int64(upto - pos)
		rep.RecomputedBlocks = int64((upto - pos + snapshot.DenseBlockTokens - 1) / snapshot.DenseBlockTokens)
	}
	if a := r.Meta.ApproxFrom; a != nil && *a < pos {
		tape.markApprox(*a) // read back as saved: approximate from there on
	}
	tape.spans = ClipSpans(r.Spans, len(tape.tokens))
	return nil
}

// Restore brings every saved block back as it was (parked blocks into
// the arena) and the engine's image at its positions: a hot set's blocks
// were computed against their own hot set, so only their saved bytes
// reproduce it.
func (h *hotSet) Restore(ctx context.Context, r Restore, _ int) error {
	tape, snap, saved, rep := h.tape, r.Snap, r.Tokens, r.Report
	sh, hc := r.Meta.Hot, h.env.Hot
	if sh == nil || sh.Limit != hc.Limit || sh.Window != hc.Window || sh.Block != hc.Block || sh.Sinks != hc.Sinks {
		return fmt.Errorf("%w: snapshot %s was saved with a different hot set (limit/window/block/sinks); restart ctxd with the settings it was saved under", protocol.ErrIncompatible, snap.Name)
	}
	for _, b := range sh.Blocks {
		if b.VStart < 0 || b.N <= 0 || b.VStart+b.N > len(saved) || b.KV >= len(snap.Blocks) {
			return fmt.Errorf("%w: snapshot %s: block at %d+%d outside its saved of %d", protocol.ErrIncompatible, snap.Name, b.VStart, b.N, len(saved))
		}
	}
	if err := h.Clear(); err != nil {
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
	ch, cancel := h.env.Tiers.FetchAll(ctx, keys)
	defer cancel()
	cur, curIdx := tiers.Fetched{}, -1
	h.turn, h.evictions, h.admissions = sh.Turn, sh.Evictions, sh.Admissions
	for k, sb := range sh.Blocks {
		h.env.Progress(ctx, "restore", k, len(sh.Blocks))
		toks := saved[sb.VStart : sb.VStart+sb.N]
		b := &hotBlock{id: h.env.NewBlockID(), seq: len(h.blocks), vstart: sb.VStart, n: sb.N, class: sb.Class, kind: sb.Kind,
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
			fb.Err = h.env.Engine.InsertRange(engine.Range{Pos0: ir.PStart, Count: ir.N, Blob: fb.Blob}, ir.PStart)
		}
		if fb.Err != nil {
			// Without the engine image the hot set cannot be rebuilt
			// exactly: leave the session empty rather than inconsistent.
			err := fmt.Errorf("%w: snapshot %s: hot range at %d: %w", protocol.ErrInternal, snap.Name, ir.PStart, fb.Err)
			if cerr := h.Clear(); cerr != nil {
				h.env.Engine.Clear()
				h.Reset()
				err = fmt.Errorf("%w (clearing the session: %w)", err, cerr)
			}
			return err
		}
	}
	tape.tokens = append(tape.tokens[:0], saved...)
	tape.spans = ClipSpans(r.Spans, len(saved))
	if a := r.Meta.ApproxFrom; a != nil && *a < len(saved) {
		tape.markApprox(*a)
	}
	h.tailV, h.tailP = sh.TailV, sh.TailP
	h.mark = loadMark(sh.Mark, h.blocks, len(saved))
	return nil
}
