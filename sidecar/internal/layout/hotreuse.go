package layout

import (
	"context"
	"sort"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Segment reuse in a hot set (segreuse.go has the dense case and the
// planning both share). The moved runs' KV is taken out of the engine in
// pieces of at most a prefill chunk; the tape is cut at the change; then,
// in tape order, the gaps stream in as usual (AppendTokens) and each piece
// is inserted at the end of the tail (appendKV), where a decoded chunk
// would have gone, so sealing, parking and eviction see the same stream.
// A parked block wholly inside a run is read back from the tiers; the
// rest of a run whose KV is not in the engine is prefilled.

// kvPiece is a moved run's KV in pieces: dst is its first tape index in
// the new prompt.
type kvPiece struct {
	dst int
	r   engine.Range
}

// enginePos is where tape index v is in the engine and how many tokens
// from v on lie at consecutive positions there; ok is false when v's
// block is not in the engine (n then counts the block's rest).
func (h *hotSet) enginePos(v int) (p, n int, ok bool) {
	if v >= h.tailV {
		return h.tailP + v - h.tailV, len(h.tape.tokens) - v, true
	}
	b := h.blockAt(v)
	n = b.vstart + b.n - v
	if !b.res.inEngine() {
		return 0, n, false
	}
	return b.pstart + v - b.vstart, n, true
}

// pieces takes the KV of the plan's runs out of the engine, and reads the
// parked blocks that lie wholly inside a run from the tiers (a block's KV
// comes back whole or not at all).
func (h *hotSet) pieces(ctx context.Context, runs []policy.ReuseRun) ([]kvPiece, error) {
	chunk := h.env.Hot.Limits().ChunkTokens()
	var out []kvPiece
	for _, run := range runs {
		if run.Donor > 0 {
			continue // another session's: copyFromDonors
		}
		for off := 0; off < run.Len; {
			v := run.Src + off
			p, n, ok := h.enginePos(v)
			if !ok {
				if b := h.blockAt(v); b.vstart == v && b.n <= run.Len-off && b.res.copyTier() != tiers.None {
					if kv, err := h.env.Tiers.Fetch(ctx, b.res.copyTier(), b.id, b.ssdKey, nil); err == nil {
						out = append(out, kvPiece{dst: run.Dst + off, r: engine.Range{Pos0: b.pos0, Count: b.n, Blob: kv}})
					} else if ctx.Err() != nil {
						return nil, EngineErr(ctx.Err())
					}
				}
				off += n
				continue
			}
			n = min(n, run.Len-off, chunk)
			r, err := h.env.Engine.ExtractRange(p, p+n)
			if err != nil {
				return nil, EngineErr(err)
			}
			out = append(out, kvPiece{dst: run.Dst + off, r: r})
			off += n
		}
	}
	return out, nil
}

// blockAt is the sealed block holding tape index v (v < tailV).
func (h *hotSet) blockAt(v int) *hotBlock {
	return h.blocks[sort.Search(len(h.blocks), func(i int) bool { return h.blocks[i].vstart+h.blocks[i].n > v })]
}

// appendKV puts a piece's KV after the tape, as AppendTokens would have
// decoded toks, evicting first when the hot set is full; false when no
// room could be made (the caller decodes toks instead).
func (h *hotSet) appendKV(ctx context.Context, r engine.Range, toks []engine.Token) (bool, error) {
	tape, hc := h.tape, h.env.Hot
	if free := hc.Limit - h.used(); free < r.Count {
		if err := h.evictFor(r.Count - free); err != nil {
			return false, err
		}
	}
	end := h.physEnd()
	if end+r.Count > hc.Limit {
		return false, nil
	}
	if err := h.env.Engine.InsertRange(r, end); err != nil {
		return false, EngineErr(err)
	}
	tape.markApprox(len(tape.tokens))
	tape.tokens = append(tape.tokens, toks...)
	tape.logitsAt = -1
	for len(tape.tokens) >= h.nextSeal() {
		h.seal(ctx)
	}
	return true, nil
}

// segmentSync is the hot set's segment reuse (see denseLayout's).
func (h *hotSet) segmentSync(ctx context.Context, target Prompt, kept int, needLogits, keepTail, retrieve bool, r *SyncResult) (bool, error) {
	tape := h.tape
	sr, ok, err := planReuse(h.env, tape, target, kept, h.env.SessionTokens(), needLogits, keepTail, false, r)
	if !ok || err != nil {
		return false, err
	}
	full := sr.full
	dc, lost, err := copyFromDonors(ctx, target.Donors, sr.plan.Runs, -1, kept, kept)
	if lost {
		h.Reset()
	}
	if err != nil {
		if lost || ctx.Err() != nil {
			return true, err
		}
		dc = donorFailed(r, err)
	}
	pieces, err := h.pieces(ctx, sr.plan.Runs)
	if err != nil {
		return false, err
	}
	if pieces = mergePieces(pieces, dc.runs); len(pieces) == 0 {
		r.Recomputed = sr.matchedIn // no KV to move: the matched tokens are prefilled
		return false, nil
	}
	approxKept := kept - tape.ExactTokens(kept)
	before := len(tape.tokens)
	kept, err = h.Cut(ctx, kept) // a hot set keeps less: up to the start of the block kept falls in
	if err != nil {
		return true, err
	}
	r.Dropped = before - kept
	approxKept = min(approxKept, kept-tape.ExactTokens(kept))
	tape.spans = full.Spans
	var moved []policy.ReuseRun
	defer func() { countReuse(r, tape, target, sr, kept, approxKept, moved) }()
	if retrieve {
		h.turn++
		var turn []engine.Token
		if full.Turn > 0 && full.Turn < len(full.Tokens) {
			turn = full.Tokens[full.Turn:]
		}
		if err := h.retrieveFor(ctx, full.Tokens[kept:], turn); err != nil {
			return true, err
		}
	}
	for i, pc := range pieces {
		if pc.dst < len(tape.tokens) {
			continue // overlaps what was appended (a piece of an earlier run)
		}
		if cur := len(tape.tokens); pc.dst > cur {
			if err := h.AppendTokens(ctx, full.Tokens[cur:pc.dst]); err != nil {
				return true, err
			}
		}
		toks := full.Tokens[pc.dst : pc.dst+pc.r.Count]
		done, err := h.appendKV(ctx, pc.r, toks)
		if err != nil {
			return true, err
		}
		pieces[i] = kvPiece{} // let its bytes go
		if !done {
			if err := h.AppendTokens(ctx, toks); err != nil {
				return true, err
			}
			continue
		}
		moved = append(moved, policy.ReuseRun{Dst: pc.dst, Len: len(toks)})
	}
	if cur := len(tape.tokens); cur < len(full.Tokens) {
		if err := h.AppendTokens(ctx, full.Tokens[cur:]); err != nil {
			return true, err
		}
	}
	return true, nil
}
