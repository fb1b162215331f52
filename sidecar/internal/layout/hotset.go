package layout

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	"github.com/ctxd/ctxd/shm"
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
// back in bulk (policy.PlanHotSet decides, this file carries it out).
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

// residency is where a block's KV is: in the engine or not, and which
// tier below it (package tiers) holds a copy. One value, so no combination of
// flags can contradict another.
type residency uint8

const (
	resLost       residency = iota // nowhere: the block can never come back
	resParked                      // in the arena only
	resSpilled                     // in the SSD tier only (a full arena spilled it)
	resHotOnly                     // in the engine only: lost if evicted
	resHotParked                   // in the engine, a copy in the arena
	resHotSpilled                  // in the engine, a copy in the SSD tier
)

// residencyOf is the residency of a block in the engine or not, with a
// copy in where.
func residencyOf(inEngine bool, where tiers.Tier) residency {
	r := [...]residency{tiers.None: resLost, tiers.Arena: resParked, tiers.SSD: resSpilled}[where]
	if inEngine {
		r += resHotOnly
	}
	return r
}

// inEngine reports whether the block's KV is in the engine (it is hot).
func (r residency) inEngine() bool { return r >= resHotOnly }

// copyTier is the tier holding the block's copy below the engine.
func (r residency) copyTier() tiers.Tier {
	return [...]tiers.Tier{tiers.None, tiers.Arena, tiers.SSD}[r%resHotOnly]
}

// evicted is the residency after the engine lets the block go.
func (r residency) evicted() residency { return residencyOf(false, r.copyTier()) }

// admitted is the residency after the block came back into the engine.
func (r residency) admitted() residency { return residencyOf(true, r.copyTier()) }

// withCopy is the residency with the copy below the engine in where.
func (r residency) withCopy(where tiers.Tier) residency { return residencyOf(r.inEngine(), where) }

func (r residency) String() string {
	return [...]string{"lost", "parked", "spilled", "hot", "hot+parked", "hot+spilled"}[r]
}

// hotBlock is one sealed block of a session's stream.
type hotBlock struct {
	id        uint64
	seq       int
	vstart, n int // tape range [vstart, vstart+n)
	class     policy.CacheClass
	kind      policy.SegmentKind
	segID     string
	pinned    bool
	chain     shm.Hash
	res       residency
	pstart    int           // engine position while in the engine
	pos0      int           // engine position its KV was extracted at (its copies')
	ssdKey    coldstore.Key // its KV's key in the SSD tier once known; zero: none
	lastUsed  int64
	score     float64
	reason    string
	retrieved bool // in the engine because this turn's retrieval chose it
}

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
}

const tailID = math.MaxUint64

// HotConfig is the resolved hot-set configuration of the loaded model.
type HotConfig struct {
	Budget, Window, Limit int
	Block, Sinks, Recent  int
	Reserve               int              // room kept after a turn's new tokens for decoding
	Scorers               policy.ScorerSet // policy.ScorerNone: retrieval off
	NoShift               bool             // the model cannot shift: hot set off, dense fallback
}

// Limits are hc's token limits as policy sees them.
func (hc HotConfig) Limits() policy.HotLimits {
	return policy.HotLimits{Budget: hc.Budget, Window: hc.Window, Limit: hc.Limit, Block: hc.Block,
		Sinks: hc.Sinks, Recent: hc.Recent, Reserve: hc.Reserve}
}

// WithLimits returns hc with the token limits l (policy.ResolveHotLimits).
func (hc HotConfig) WithLimits(l policy.HotLimits) HotConfig {
	hc.Budget, hc.Window, hc.Limit, hc.Block = l.Budget, l.Window, l.Limit, l.Block
	hc.Sinks, hc.Recent, hc.Reserve = l.Sinks, l.Recent, l.Reserve
	return hc
}

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

func (h *hotSet) physEnd() int { return h.tailP + len(h.tape.Tokens) - h.tailV }

// used counts the tokens in the engine (hot blocks and the tail).
func (h *hotSet) used() int {
	n := len(h.tape.Tokens) - h.tailV
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
			tape.LogitsAt = -1
			return EngineErr(err)
		}
		tape.Tokens = append(tape.Tokens, toks[:n]...)
		tape.LogitsAt = len(tape.Tokens)
		toks = toks[n:]
		for len(tape.Tokens) >= h.nextSeal() {
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
	toks := tape.Tokens[h.tailV : h.tailV+n]
	b := &hotBlock{
		id: h.env.NewBlockID(), seq: len(h.blocks), vstart: h.tailV, n: n,
		chain: shm.ChainHash(prev, toks), res: resHotOnly, pstart: h.tailP, pos0: h.tailP, lastUsed: h.turn,
	}
	c := policy.ClassifyBlock(segmentSpans(tape.Spans), b.vstart, b.vstart+n)
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
	toks := append([]engine.Token(nil), h.tape.Tokens[b.vstart:b.vstart+b.n]...)
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

// planBlocks describes the session's blocks (and its open tail) to the
// planner.
func (h *hotSet) planBlocks() []policy.HotBlock {
	sinks := h.env.Hot.Sinks
	out := make([]policy.HotBlock, 0, len(h.blocks)+1)
	for _, b := range h.blocks {
		if b.res == resLost {
			continue // its KV is gone: it can never come back
		}
		out = append(out, policy.HotBlock{
			ID: b.id, Tokens: b.n, Class: b.class, Kind: b.kind, Seq: b.seq, Score: b.score,
			LastUsed: b.lastUsed, Hot: b.res.inEngine(), Pinned: b.pinned, Sink: b.vstart == 0 && sinks > 0,
		})
	}
	if n := len(h.tape.Tokens) - h.tailV; n > 0 {
		out = append(out, policy.HotBlock{ID: tailID, Tokens: n, Class: policy.ClassVolatile, Kind: policy.KindTerminal,
			Seq: len(h.blocks), LastUsed: h.turn, Hot: true, Recent: true, Sink: h.tailV == 0 && sinks > 0})
	}
	return out
}

// evictFor takes hot blocks out of the engine freeing at least need
// tokens, as policy.PlanEviction picks them (one call per prefill chunk),
// and closes the holes with compact. Freeing less is fine while some room
// is left: protected blocks fill the rest.
func (h *hotSet) evictFor(need int) error {
	hc := h.env.Hot
	blocks := make([]policy.HotBlock, 0, len(h.blocks)+1)
	for _, b := range h.blocks {
		blocks = append(blocks, policy.HotBlock{ID: b.id, Tokens: b.n, Class: b.class, Kind: b.kind, Seq: b.seq, Score: b.score,
			LastUsed: b.lastUsed, Hot: b.res.inEngine(), Pinned: b.pinned})
	}
	if n := len(h.tape.Tokens) - h.tailV; n > 0 {
		blocks = append(blocks, policy.HotBlock{ID: tailID, Tokens: n, Class: policy.ClassVolatile, Kind: policy.KindTerminal,
			Seq: len(h.blocks), LastUsed: h.turn, Hot: true, Recent: true})
	}
	plan := policy.PlanEviction(policy.EvictInput{Blocks: blocks, SinkTokens: hc.Sinks, RecentTokens: hc.Recent, NeedTokens: need})
	for _, id := range plan.Unpinned {
		b := h.find(id)
		b.pinned = false
		h.note(fmt.Sprintf("pinned segments exceed the hot budget %d: block %d (%s) unpinned", hc.Limit, b.id, b.segID))
	}
	for _, id := range plan.Evict {
		if err := h.evict(h.find(id)); err != nil {
			return err
		}
	}
	if len(plan.Evict) > 0 {
		if err := h.compact(); err != nil {
			return err
		}
	}
	if hc.Limit-h.used() <= 0 {
		return fmt.Errorf("%w: the hot budget of %d tokens holds only protected tokens (sinks %d, recent window %d, tail %d)",
			protocol.ErrResourceExhausted, hc.Limit, hc.Sinks, hc.Recent, len(h.tape.Tokens)-h.tailV)
	}
	return nil
}

// evict takes block b out of the engine.
func (h *hotSet) evict(b *hotBlock) error {
	if _, err := h.env.Engine.Remove(b.pstart, b.pstart+b.n); err != nil {
		return EngineErr(err)
	}
	b.res, b.retrieved = b.res.evicted(), false
	h.evictions++
	h.env.Counters.Evicted()
	return nil
}

// compact shifts hot ranges down so they tile [0, physEnd) again.
func (h *hotSet) compact() error {
	tape := h.tape
	type rng struct {
		b     *hotBlock // nil: the tail
		start int
		n     int
	}
	var rs []rng
	for _, b := range h.blocks {
		if b.res.inEngine() {
			rs = append(rs, rng{b, b.pstart, b.n})
		}
	}
	if n := len(tape.Tokens) - h.tailV; n > 0 {
		rs = append(rs, rng{nil, h.tailP, n})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].start < rs[j].start })
	next := 0
	for _, r := range rs {
		if r.start != next {
			if err := h.env.Engine.Shift(r.start, r.start+r.n, next-r.start); err != nil {
				return EngineErr(err)
			}
			tape.LogitsAt = -1
		}
		if r.b != nil {
			r.b.pstart = next
		} else {
			h.tailP = next
		}
		next += r.n
	}
	if len(tape.Tokens)-h.tailV == 0 {
		h.tailP = next
	}
	return nil
}

// Cut keeps tape[:n] (rounded down to a block boundary when n falls inside
// a sealed block) and returns the length kept.
func (h *hotSet) Cut(n int) (int, error) {
	tape, ectx := h.tape, h.env.Engine
	if n >= len(tape.Tokens) {
		return len(tape.Tokens), nil
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
	if len(tape.Tokens) > h.tailV {
		if _, err := ectx.Remove(h.tailP, h.tailP+len(tape.Tokens)-h.tailV); err != nil {
			return 0, EngineErr(err)
		}
	}
	h.blocks = h.blocks[:k]
	h.tailV = keep
	tape.Keep(keep)
	if err := h.compact(); err != nil {
		return 0, err
	}
	return keep, nil
}

// Sync keeps the common prefix, then streams the rest in; with retrieve,
// parked blocks relevant to the new tokens are brought back first (once
// per turn, in bulk).
func (h *hotSet) Sync(ctx context.Context, target Prompt, needLogits, keepTail, retrieve bool) (SyncResult, error) {
	tape := h.tape
	r := SyncResult{PromptTokens: len(target.Tokens)}
	limit := h.env.SessionTokens()
	if len(target.Tokens) > limit {
		return r, protocol.OverflowError{PromptTokens: int64(len(target.Tokens)), ContextTokens: int64(limit)}
	}
	lcp := tape.ReusablePrefix(target.Tokens)
	r.Reusable = lcp
	if lcp == len(target.Tokens) && keepTail && !needLogits {
		r.Reused = lcp
		return r, nil
	}
	keep := lcp
	if needLogits && keep == len(target.Tokens) && keep > 0 && tape.LogitsAt != keep {
		keep--
	}
	before := len(tape.Tokens)
	kept, err := h.Cut(keep)
	if err != nil {
		return r, err
	}
	r.Dropped = before - kept
	r.Reused = kept
	tape.Spans = target.Spans
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
		tape.Spans = ClipSpans(target.Spans, len(tape.Tokens))
		r.Prefilled = len(tape.Tokens) - kept
		return r, err
	}
	r.Prefilled = len(newToks)
	return r, nil
}

// retrieveFor scores the parked blocks against what the turn brings (its
// own segments, else the new tokens; policy.TurnQuery decides), plans the
// hot set and moves blocks accordingly.
func (h *hotSet) retrieveFor(ctx context.Context, newToks, turn []engine.Token) error {
	hc := h.env.Hot
	if len(h.blocks) == 0 {
		return nil
	}
	suffix := hc.Limits().TurnSuffixTokens(len(newToks))
	for _, b := range h.blocks {
		b.score, b.reason = 0, ""
	}
	rep := &retrievalReport{turn: h.turn, scorers: hc.Scorers}
	if hc.Scorers != policy.ScorerNone {
		query := policy.TurnQuery(policy.TurnQueryInput{Turn: turn, New: newToks, MaxTokens: hc.Limit})
		rep.queryTokens = len(query)
		var scores []policy.BlockScore
		if hc.Scorers.Has(policy.ScorerLexical) {
			start := time.Now()
			scores = h.index.Score(query)
			rep.add("lexical", time.Since(start), scores, h.index.Len(), 0)
		}
		if hc.Scorers.Has(policy.ScorerAttention) {
			var err error
			if scores, err = h.attentionRank(ctx, query, scores, rep); err != nil {
				return err
			}
		}
		for _, s := range scores {
			if b := h.find(s.ID); b != nil {
				b.score = s.Score
			}
		}
	}
	in := policy.HotSetInput{
		HotBudget: hc.Limit, SinkTokens: hc.Sinks, RecentTokens: policy.TurnRecentTokens(hc.Recent, len(newToks)), SuffixTokens: suffix,
		TrainedWindow: hc.Window, MinScore: math.SmallestNonzeroFloat64,
	}
	if hc.Scorers == policy.ScorerNone {
		in.MinScore = math.Inf(1) // nothing is retrieved
	}
	in.Blocks = h.planBlocks()
	plan, err := policy.PlanHotSetUnpinning(in)
	if plan.Unpinned != nil {
		h.note(fmt.Sprintf("pinned segments do not fit the hot budget (%v): planning without pins", plan.Unpinned))
	}
	if err != nil {
		return fmt.Errorf("%w: %w", protocol.ErrResourceExhausted, err)
	}
	rep.budgetTokens = plan.Limit - in.SuffixTokens - plan.ProtectedTokens
	rep.admitted = map[uint64]bool{}
	for _, e := range plan.Layout {
		if e.Role == policy.RoleRetrieved {
			rep.admitted[e.ID] = true
		}
	}
	if err := h.applyPlan(ctx, plan); err != nil {
		return err
	}
	h.plan, h.retrieval = &plan, rep
	return nil
}

func (h *hotSet) find(id uint64) *hotBlock {
	// Blocks are created with increasing ids and kept in stream order.
	i := sort.Search(len(h.blocks), func(i int) bool { return h.blocks[i].id >= id })
	if i < len(h.blocks) && h.blocks[i].id == id {
		return h.blocks[i]
	}
	for _, b := range h.blocks {
		if b.id == id {
			return b
		}
	}
	return nil
}

// tempBase is where kept ranges wait while the layout is rebuilt; far
// above any real position, and never decoded at.
const tempBase = 1 << 24

// applyPlan evicts, moves and admits blocks so the engine holds exactly
// the plan's layout. A block whose copy cannot be read (a failure or ctx
// ending) stays where it was and is not admitted; the layout closes over
// its hole, and a cancelled ctx is reported once the layout is settled.
func (h *hotSet) applyPlan(ctx context.Context, plan policy.HotSetPlan) error {
	tape, ectx, t := h.tape, h.env.Engine, h.env.Tiers
	tape.LogitsAt = -1
	for _, id := range plan.Evict {
		b := h.find(id)
		if b == nil || !b.res.inEngine() {
			continue
		}
		if err := h.evict(b); err != nil {
			return err
		}
	}
	type move struct {
		b        *hotBlock
		from, to int
		n        int
		admit    bool
		role     policy.HotRole
		reason   string
	}
	var moves []move
	for _, e := range plan.Layout {
		if e.ID == tailID {
			moves = append(moves, move{from: h.tailP, to: e.Start, n: e.Tokens})
			continue
		}
		b := h.find(e.ID)
		if b == nil {
			return fmt.Errorf("%w: plan names unknown block %d", protocol.ErrInternal, e.ID)
		}
		moves = append(moves, move{b: b, from: b.pstart, to: e.Start, n: b.n, admit: !b.res.inEngine(), role: e.Role, reason: e.Reason})
	}
	// Park kept ranges far up, bring admitted blocks in, then settle.
	for _, m := range moves {
		if !m.admit && m.from != tempBase+m.to {
			if err := ectx.Shift(m.from, m.from+m.n, tempBase+m.to-m.from); err != nil {
				return EngineErr(err)
			}
		}
	}
	var kv []byte
	for _, m := range moves {
		if !m.admit {
			continue
		}
		where := m.b.res.copyTier()
		got, err := t.Fetch(ctx, where, m.b.id, m.b.ssdKey, kv[:0])
		if err != nil {
			if where == tiers.Arena && ctx.Err() == nil {
				// The arena lost it: that copy is gone.
				t.DropParked(m.b.id)
				m.b.res = m.b.res.withCopy(tiers.None)
			}
			// An SSD read that failed or was cancelled keeps the block
			// spilled: a later turn may still bring it back.
			h.note(fmt.Sprintf("block %d unreadable from the %s tier: %v", m.b.id, where, err))
			continue
		}
		if where == tiers.Arena {
			kv = got // reuse the buffer; SSD reads bring their own
		}
		if err := t.Insert(ectx, m.b.id, engine.Range{Pos0: m.b.pos0, Count: m.b.n, Blob: got}, m.to); err != nil {
			// Bytes the engine refuses are as good as lost; the layout
			// closes over the hole below, so the KV stays consistent.
			h.dropCopy(m.b)
			h.note(fmt.Sprintf("block %d refused by the engine on admission: %v", m.b.id, err))
			continue
		}
		m.b.res = m.b.res.admitted()
		m.b.pstart = m.to
		h.admissions++
		h.env.Counters.Admitted()
	}
	for _, m := range moves {
		if m.admit {
			continue
		}
		if err := ectx.Shift(tempBase+m.to, tempBase+m.to+m.n, -tempBase); err != nil {
			return EngineErr(err)
		}
		if m.b != nil {
			m.b.pstart = m.to
		} else {
			h.tailP = m.to
		}
	}
	for _, m := range moves {
		if m.b != nil && m.b.res.inEngine() {
			m.b.retrieved = m.role == policy.RoleRetrieved
			m.b.reason = m.reason
			if m.b.retrieved {
				m.b.lastUsed = h.turn
			}
		}
	}
	if len(tape.Tokens) == h.tailV {
		h.tailP = plan.SuffixStart
	}
	// A block that could not be admitted leaves a hole: close it.
	if err := h.compact(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return EngineErr(err)
	}
	return nil
}

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
// blocks as an orphan tape (adopt.go); the rest of the arena copies are
// freed.
func (h *hotSet) Release(keep bool) {
	for _, b := range h.blocks {
		if b.res.copyTier() == tiers.SSD {
			h.dropCopy(b)
		}
	}
	if keep && h.env.Tiers.HasArena() {
		h.orphanBlocks()
		h.blocks = nil
	}
	for _, b := range h.blocks {
		h.dropCopy(b)
	}
	h.blocks = nil
}

// OrphanPrefixes are the tokens each orphan tape shares with target.
func (h *hotSet) OrphanPrefixes(target []engine.Token) []int {
	return h.env.Tiers.OrphanPrefixes(target)
}
