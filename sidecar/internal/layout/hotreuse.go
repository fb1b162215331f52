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
// A parked block inside a run is read back from the tiers, whole or, when
// the run holds only part of it, trimmed to that part (kvpart.go) unless
// prefilling that part is cheaper; only KV that is nowhere is prefilled.

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
// parked blocks a run covers from the tiers (a block only partly inside a
// run comes back trimmed, when policy finds that cheaper than prefilling
// its part). declined counts the tokens left to prefill by that choice.
func (h *hotSet) pieces(ctx context.Context, runs []policy.ReuseRun) (out []kvPiece, declined int, err error) {
	chunk := h.env.Hot.Limits().ChunkTokens()
	for _, run := range runs {
		if run.Donor > 0 {
			continue // another session's: copyFromDonors
		}
		for off := 0; off < run.Len; {
			v := run.Src + off
			p, n, ok := h.enginePos(v)
			if !ok {
				b := h.blockAt(v)
				lo, m := v-b.vstart, min(n, run.Len-off)
				off += m
				if b.res.copyTier() == tiers.None {
					continue // nowhere: prefilled
				}
				if !partWorthCopying(h.env, m, b.n) {
					declined += m
					continue
				}
				kv, err := h.env.Tiers.Fetch(ctx, b.res.copyTier(), b.id, b.ssdKey, nil)
				if err != nil {
					if ctx.Err() != nil {
						return nil, 0, EngineErr(ctx.Err())
					}
					continue // unreadable: prefilled
				}
				pc := kvPiece{dst: run.Dst + off - m, r: engine.Range{Pos0: b.pos0, Count: b.n, Blob: kv}}
				if m < b.n {
					pc.lo, pc.n = lo, m
				}
				out = append(out, pc)
				continue
			}
			n = min(n, run.Len-off, chunk)
			r, err := h.env.Engine.ExtractRange(p, p+n)
			if err != nil {
				return nil, 0, EngineErr(err)
			}
			out = append(out, kvPiece{dst: run.Dst + off, r: r})
			off += n
		}
	}
	return out, declined, nil
}

// blockAt is the sealed block holding tape index v (v < tailV).
func (h *hotSet) blockAt(v int) *hotBlock {
	return h.blocks[sort.Search(len(h.blocks), func(i int) bool { return h.blocks[i].vstart+h.blocks[i].n > v })]
}

// appendKV puts a piece's KV after the tape, as AppendTokens would have
// decoded toks, evicting first when the hot set is full; false when no
// room could be made (the caller decodes toks instead). approx marks the
// tokens approximate (moved past an early change, copied from another
// session); KV kept from the tape itself stays what it was.
func (h *hotSet) appendKV(ctx context.Context, pc kvPiece, toks []engine.Token, approx bool) (bool, error) {
	tape, hc, ectx := h.tape, h.env.Hot, h.env.Engine
	lo, n := pc.want()
	if free := hc.Limit - h.used(); free < n {
		if err := h.evictFor(n - free); err != nil {
			return false, err
		}
	}
	end := h.physEnd()
	if end+n > hc.Limit || h.used()+pc.r.Count > ectx.Options().ContextTokens {
		return false, nil
	}
	if err := insertPart(ectx, pc.r, lo, n, end); err != nil {
		return false, EngineErr(err)
	}
	if approx {
		tape.markApprox(len(tape.tokens))
	}
	tape.tokens = append(tape.tokens, toks...)
	tape.logitsAt = -1
	for len(tape.tokens) >= h.nextSeal() {
		h.seal(ctx)
	}
	return true, nil
}

// inPlace reports whether the tape's first n tokens sit at their tape
// positions (no eviction has moved the stream yet): a donor's exact prefix
// may then follow them.
func (h *hotSet) inPlace(n int) bool {
	for _, b := range h.blocks {
		if b.vstart >= n {
			return true
		}
		if !b.res.inEngine() || b.pstart != b.vstart {
			return false
		}
	}
	return h.tailP == h.tailV
}

// exactPrefix is how much of a donor's exact prefix ending at end a
// prompt of total tokens takes, and where the prefill after it first
// stops (policy.HotExactPrefix).
func (h *hotSet) exactPrefix(end, total int) (take, stop int) {
	hc := h.env.Hot
	return policy.HotExactPrefix(end, total, hc.Limit, h.env.Engine.Options().BatchTokens, hc.Limits().ChunkTokens())
}

// blockStart is the start of the block (or open tail) tape index v is in.
func (h *hotSet) blockStart(v int) int {
	if v >= h.tailV {
		return h.tailV
	}
	return h.blockAt(v).vstart
}

// segmentSync is the hot set's segment reuse (see denseLayout's).
func (h *hotSet) segmentSync(ctx context.Context, target Prompt, kept int, needLogits, keepTail, retrieve bool, r *SyncResult) (bool, error) {
	tape := h.tape
	var exactEnd func(end, total int) int
	if h.inPlace(kept) {
		exactEnd = func(end, total int) int { take, _ := h.exactPrefix(end, total); return take }
	}
	sr, ok, err := planReuse(h.env, tape, target, kept, h.env.SessionTokens(), needLogits, keepTail, exactEnd, r)
	if !ok || err != nil {
		return false, err
	}
	full := sr.full
	// A donor's exact prefix is copied from the start of the block kept
	// falls in (both streams cut into blocks alike), so every donor block
	// goes back at the position it was computed at, untrimmed at its head.
	cutAt, prefixDonor := kept, -1
	if sr.prefixDonor >= 0 && sr.prefixEnd > kept {
		cutAt, prefixDonor = h.blockStart(kept), sr.prefixDonor
	}
	dc, lost, err := copyFromDonors(ctx, target.Donors, sr.plan.Runs, prefixDonor, cutAt, sr.prefixEnd)
	if lost {
		h.Reset()
	}
	if err != nil {
		if lost || ctx.Err() != nil {
			return true, err
		}
		dc = donorFailed(r, err)
	}
	if prefixDonor >= 0 && (len(dc.prefix) == 0 || dc.prefix[0].dst != cutAt) {
		// The donor's prefix does not start where the cut would: keep the
		// session's own tokens and prefill the rest of the prefix.
		cutAt, dc.prefix = kept, nil
	}
	pieces, declined, err := h.pieces(ctx, sr.plan.Runs)
	if err != nil {
		return false, err
	}
	// Tokens policy chose to prefill rather than bring back: within the
	// budget, recomputed.
	r.Budget += declined + dc.declined
	if pieces = mergePieces(pieces, dc.runs); len(pieces) == 0 && len(dc.prefix) == 0 {
		r.Recomputed = sr.matchedIn // no KV to move: the matched tokens are prefilled
		return false, nil
	}
	approxKept := kept - tape.ExactTokens(kept)
	before := len(tape.tokens)
	kept, err = h.Cut(ctx, cutAt)
	if err != nil {
		return true, err
	}
	r.Dropped = before - kept
	// The donor's exact prefix, at the positions it was computed at.
	for _, pc := range dc.prefix {
		_, n := pc.want()
		if pc.dst != len(tape.tokens) || pc.dst != h.physEnd() || h.used()+n > h.env.Hot.Limit {
			break // a hole, or no room without moving the stream: the rest is prefilled
		}
		done, err := h.appendKV(ctx, pc, full.Tokens[pc.dst:pc.dst+n], false)
		if err != nil {
			return true, err
		}
		if !done {
			break
		}
		kept = len(tape.tokens)
	}
	prefixTaken := prefixDonor >= 0 && kept > cutAt
	approxKept = min(approxKept, kept-tape.ExactTokens(kept))
	tape.spans = full.Spans
	var moved []policy.ReuseRun
	cutDeclined := h.takeDeclined()
	r.Budget += cutDeclined
	defer func() {
		countReuse(r, tape, target, sr, kept, approxKept, moved)
		r.Recomputed += cutDeclined
	}()
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
	if prefixTaken {
		// After a donor's exact prefix the prefill first runs to where a
		// cold prefill's stream stands, so it evicts as that one does.
		_, stop := h.exactPrefix(kept, len(full.Tokens))
		first := len(full.Tokens)
		for _, pc := range pieces {
			if pc.dst >= kept {
				first = pc.dst
				break
			}
		}
		if stop > len(tape.tokens) && stop <= first {
			if err := h.AppendTokens(ctx, full.Tokens[len(tape.tokens):stop]); err != nil {
				return true, err
			}
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
		_, n := pc.want()
		toks := full.Tokens[pc.dst : pc.dst+n]
		done, err := h.appendKV(ctx, pc, toks, true)
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
