package layout

import (
	"context"
	"math"
	"sort"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Hot-set mode: a session's stream of tokens (its tape) may be far longer
// than the engine holds. The stream is cut into blocks — the first
// SinkTokens tokens, then BlockTokens each — and every sealed block's KV is
// parked in the host-RAM arena. The engine holds a bounded hot set laid out
// [sinks][pinned][retrieved][recent][new tokens] at positions that stay
// below the trained window. While a long prompt streams in, the least
// useful hot blocks are evicted and the rest shifted down; at each turn the
// parked blocks are scored against the new tokens and the best are brought
// back in bulk (policy.PlanHotSet decides, hotplan.go carries it out).
// Parked blocks live in the tiers (package tiers): the arena, or the SSD
// tier once a full arena spilled them.
//
// Invariants (Check verifies them):
//   - hot blocks and the open tail occupy disjoint position ranges that
//     tile [0, physEnd) exactly, physEnd ≤ limit;
//   - the tail holds tape[tailV:], at positions [tailP, physEnd);
//   - blocks partition tape[:tailV] in order.

// Positions: a "v" coordinate (vstart, tailV) is a tape index, the
// token's place in the session's stream; a "p" coordinate (pstart, tailP,
// pos0) is an engine position in sequence 0. Dense sessions have v = p; a
// hot set moves blocks, so a block's p changes while its v never does.

// hotSet is a session in hot-set mode: its blocks, its open tail and its
// retrieval index. It is the session's Layout.
type hotSet struct {
	env        *Env
	tape       *Tape
	sessionID  uint64 // names its blocks' session in the arena
	blocks     []*hotBlock
	tailV      int // tape index where the open tail starts
	tailP      int // engine position of the tail's first token
	index      *policy.BM25Index
	attn       *policy.AttentionIndex // key summaries; nil until attention ranks (attention.go)
	turn       int64
	plan       *policy.HotSetPlan
	retrieval  *retrievalReport // the last turn's retrieval, for explain
	evictions  int64
	admissions int64
	diag       []string
	mark       *turnMark // the layout where the last turn started (hotturn.go)
	shortfall  bool      // the last plan applied could not admit every block it named
	// declined counts the tokens cuts chose to prefill again rather than
	// read back (policy.PartialBlockWorthCopying); the sync reports them
	// in its budget.
	declined int
}

const tailID = math.MaxUint64

// NewHotSet is the hot-set layout of session id, whose tape is t.
func NewHotSet(env *Env, t *Tape, id uint64) Layout {
	h := &hotSet{env: env, tape: t, sessionID: id}
	h.resetState()
	return h
}

// resetState forgets every block (their copies are the caller's to free).
func (h *hotSet) resetState() {
	idx, _ := policy.NewBM25Index(policy.DefaultBM25Options())
	*h = hotSet{env: h.env, tape: h.tape, sessionID: h.sessionID, index: idx}
}

func (h *hotSet) Mode() string   { return "hot" }
func (h *hotSet) MaxTokens() int { return h.env.SessionTokens() }

func (h *hotSet) physEnd() int { return h.tailP + len(h.tape.tokens) - h.tailV }

// used counts the tokens in the engine (hot blocks and the tail).
func (h *hotSet) used() int {
	n := len(h.tape.tokens) - h.tailV
	for _, b := range h.blocks {
		if b.res.inEngine() {
			n += b.n
		}
	}
	return n
}

// nextSeal is the tape length at which the open tail becomes a block.
func (h *hotSet) nextSeal() int {
	hc := h.env.Hot
	if h.tailV < hc.Sinks {
		return hc.Sinks
	}
	return h.tailV + hc.Block
}

// clipString is s cut to at most n bytes.
func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func (h *hotSet) note(s string) {
	h.diag = append(h.diag, s)
	if len(h.diag) > 32 {
		h.diag = h.diag[len(h.diag)-32:]
	}
}

// Cut keeps tape[:n] and returns the length kept: n, or, when n falls
// inside a sealed block whose KV is nowhere (or which policy finds cheaper
// to prefill again than to read back), the start of that block. A cut
// back to where the last turn started restores the layout it had there
// (hotturn.go).
func (h *hotSet) Cut(ctx context.Context, n int) (int, error) {
	if h.turnChoice(n).Restore {
		if err := h.restoreTurn(ctx); err != nil {
			return len(h.tape.tokens), err
		}
		return n, nil
	}
	return h.cut(ctx, n)
}

// cut is Cut without the turn's layout. The sealed block n falls in stops
// being a block: its first tokens, up to n, become the open tail again,
// their KV taken from the engine or read back from the block's copy and
// put at the end of the layout (kept KV: what was exact stays exact).
func (h *hotSet) cut(ctx context.Context, n int) (int, error) {
	tape, ectx := h.tape, h.env.Engine
	if n >= len(tape.tokens) {
		return len(tape.tokens), nil
	}
	if h.mark != nil && n < h.mark.at {
		h.mark = nil // the turn it remembers is being cut away
	}
	if n >= h.tailV {
		p := h.tailP + (n - h.tailV)
		if _, err := ectx.Remove(p, -1); err != nil {
			return 0, EngineErr(err)
		}
		tape.Keep(n)
		return n, nil
	}
	k := sort.Search(len(h.blocks), func(i int) bool { return h.blocks[i].vstart+h.blocks[i].n > n })
	keep := h.blocks[k].vstart
	head, err := h.blockHead(ctx, h.blocks[k], n-keep)
	if err != nil {
		return 0, err
	}
	headToks := append([]engine.Token(nil), tape.tokens[keep:n]...)
	spans, approxFrom, expireFrom := ClipSpans(tape.spans, n), tape.approxFrom, tape.expireFrom
	for _, b := range h.blocks[k:] {
		if b.res.inEngine() {
			if _, err := ectx.Remove(b.pstart, b.pstart+b.n); err != nil {
				return 0, EngineErr(err)
			}
		}
		h.dropCopy(b)
		h.index.Remove(b.id)
		h.forgetSummary(b.id)
	}
	if len(tape.tokens) > h.tailV {
		if _, err := ectx.Remove(h.tailP, h.tailP+len(tape.tokens)-h.tailV); err != nil {
			return 0, EngineErr(err)
		}
	}
	h.blocks = h.blocks[:k]
	h.tailV = keep
	tape.Keep(keep)
	if err := h.compact(); err != nil {
		return 0, err
	}
	if len(headToks) == 0 || head.r.Count == 0 {
		return keep, nil
	}
	if done, err := h.appendKV(ctx, head, headToks, false); err != nil || !done {
		return keep, err
	}
	tape.spans = spans
	if approxFrom >= keep && approxFrom < n {
		tape.approxFrom = approxFrom
	}
	if expireFrom >= keep && expireFrom < n {
		tape.expireFrom = expireFrom
	}
	return n, nil
}

// blockHead is the KV of block b's first m tokens: from the engine, or its
// whole copy read back to be trimmed; an empty piece when there is none
// (no copy, an unreadable one) or policy finds prefilling them cheaper
// (counted in h.declined).
func (h *hotSet) blockHead(ctx context.Context, b *hotBlock, m int) (kvPiece, error) {
	switch {
	case m <= 0:
		return kvPiece{}, nil
	case b.res.inEngine():
		r, err := h.env.Engine.ExtractRange(b.pstart, b.pstart+m)
		if err != nil {
			return kvPiece{}, EngineErr(err)
		}
		return kvPiece{r: r}, nil
	case b.res.copyTier() == tiers.None:
		return kvPiece{}, nil
	case !partWorthCopying(h.env, m, b.n):
		h.declined += m
		return kvPiece{}, nil
	}
	kv, err := h.env.Tiers.Fetch(ctx, b.res.copyTier(), b.id, b.ssdKey, nil)
	if err != nil {
		if ctx.Err() != nil {
			return kvPiece{}, EngineErr(ctx.Err())
		}
		return kvPiece{}, nil
	}
	return kvPiece{r: engine.Range{Pos0: b.pos0, Count: b.n, Blob: kv}, n: m}, nil
}

// takeDeclined returns and resets the tokens cuts chose to prefill again.
func (h *hotSet) takeDeclined() int {
	n := h.declined
	h.declined = 0
	return n
}

// Sync keeps the common prefix, then streams the rest in; with retrieve,
// parked blocks relevant to the new tokens are brought back first (once
// per turn, in bulk). A Sync that leaves logits starts a turn: its layout
// is remembered, and a later one for the same prompt, past which the tape
// has grown (a repeated request), cuts back to it (hotturn.go).
func (h *hotSet) Sync(ctx context.Context, target Prompt, needLogits, keepTail, retrieve bool) (SyncResult, error) {
	restored := 0
	if needLogits && len(target.Tokens) > 0 && h.tape.ReusablePrefix(target) == len(target.Tokens) && h.turnChoice(len(target.Tokens)).Restore {
		before := len(h.tape.tokens)
		if err := h.restoreTurn(ctx); err != nil {
			return SyncResult{PromptTokens: len(target.Tokens)}, err
		}
		restored = before - len(h.tape.tokens)
	}
	r, err := h.sync(ctx, target, needLogits, keepTail, retrieve)
	r.Dropped += restored
	if err == nil && needLogits && h.tape.HasLogits() {
		h.markTurn()
	}
	h.recordSpans(target.Compat) // orphanspans.go
	return r, err
}

// sync is Sync without the turn's layout.
func (h *hotSet) sync(ctx context.Context, target Prompt, needLogits, keepTail, retrieve bool) (SyncResult, error) {
	tape := h.tape
	r := SyncResult{PromptTokens: len(target.Tokens)}
	limit := h.env.SessionTokens()
	if len(target.Tokens) > limit {
		return r, protocol.OverflowError{PromptTokens: int64(len(target.Tokens)), ContextTokens: int64(limit)}
	}
	lcp := tape.ReusablePrefix(target)
	r.Reusable = lcp
	if lcp == len(target.Tokens) && keepTail && !needLogits {
		r.Reused = lcp
		r.Approximate = lcp - tape.ExactTokens(lcp)
		return r, nil
	}
	keep := lcp
	if needLogits && keep == len(target.Tokens) && keep > 0 && tape.logitsAt != keep {
		keep--
	}
	if keep < len(target.Tokens) {
		if done, err := h.segmentSync(ctx, target, keep, needLogits, keepTail, retrieve, &r); done || err != nil {
			return r, err
		}
	}
	r.Approximate = keep - tape.ExactTokens(keep)
	before := len(tape.tokens)
	kept, err := h.Cut(ctx, keep)
	if err != nil {
		return r, err
	}
	r.Dropped = before - kept
	r.Reused = kept
	r.Approximate = min(r.Approximate, kept-tape.ExactTokens(kept))
	if d := h.takeDeclined(); d > 0 {
		r.Budget += d
		r.Recomputed += d
	}
	tape.spans = target.Spans
	newToks := target.Tokens[kept:]
	if retrieve && len(newToks) > 0 {
		h.turn++
		var turn []engine.Token
		if target.Turn > 0 && target.Turn < len(target.Tokens) {
			turn = target.Tokens[target.Turn:]
		}
		if err := h.retrieveFor(ctx, newToks, turn); err != nil {
			return r, err
		}
	}
	if err := h.AppendTokens(ctx, newToks); err != nil {
		tape.spans = ClipSpans(target.Spans, len(tape.tokens))
		r.Prefilled = len(tape.tokens) - kept
		return r, err
	}
	r.Prefilled = len(newToks)
	return r, nil
}

// tempBase is where kept ranges wait while the layout is rebuilt; far
// above any real position, and never decoded at.
const tempBase = 1 << 24

// Clear empties the session in the engine and frees its blocks' copies.
func (h *hotSet) Clear() error {
	for _, b := range h.blocks {
		h.dropCopy(b)
	}
	if _, err := h.env.Engine.Remove(0, -1); err != nil {
		return EngineErr(err)
	}
	h.Reset()
	return nil
}

func (h *hotSet) Reset() {
	h.tape.Reset()
	h.resetState()
}

// Release frees the blocks' SSD pins and, with keep, leaves the parked
// blocks as an orphan tape (adopt.go), with resident its open tail too
// (tiers/orphantail.go); the rest of the arena copies are freed.
func (h *hotSet) Release(keep, resident bool) {
	for _, b := range h.blocks {
		if b.res.copyTier() == tiers.SSD {
			h.dropCopy(b)
		}
	}
	if keep && h.env.Tiers.HasArena() {
		h.orphanBlocks(resident)
		h.blocks = nil
	}
	for _, b := range h.blocks {
		h.dropCopy(b)
	}
	h.blocks = nil
	h.env.Tiers.DropSpans(h.sessionID) // unless an orphan tape took it
}

// OrphanPrefixes are the tokens each orphan tape shares with target.
func (h *hotSet) OrphanPrefixes(target []engine.Token) []int {
	return h.env.Tiers.OrphanPrefixes(target)
}
