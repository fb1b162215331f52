package sidecar

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
//
// Invariants (checked by checkHot in tests):
//   - hot blocks and the open tail occupy disjoint position ranges that
//     tile [0, physEnd) exactly, physEnd ≤ limit;
//   - the tail holds tape[tailV:], at positions [tailP, physEnd);
//   - blocks partition tape[:tailV] in order.

// hotBlock is one sealed block of a session's stream.
type hotBlock struct {
	id        uint64
	seq       int
	vstart, n int // tape range
	class     policy.CacheClass
	kind      policy.SegmentKind
	segID     string
	pinned    bool
	chain     shm.Hash
	hot       bool
	pstart    int  // position when hot
	pos0      int  // position its KV was extracted at
	stored    bool // its KV is in the arena
	lastUsed  int64
	score     float64
	reason    string
	retrieved bool
	coldKey   coldstore.Key // its parked KV's key in the SSD tier, once known
	hasKey    bool
	cold      bool // its KV is in the SSD tier only (spilled from a full arena)
}

// hotState is a session's hot-set bookkeeping.
type hotState struct {
	blocks     []*hotBlock
	tailV      int // tape index where the open tail starts
	tailP      int // its position in the engine
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

// hotConfig is the resolved hot-set configuration of the loaded model.
type hotConfig struct {
	budget, window, limit int
	block, sinks, recent  int
	reserve               int              // room kept after a turn's new tokens for decoding
	scorers               policy.ScorerSet // policy.ScorerNone: retrieval off
	noShift               bool             // the model cannot shift: hot set off, dense fallback
}

// limits are hc's token limits as policy sees them.
func (hc hotConfig) limits() policy.HotLimits {
	return policy.HotLimits{Budget: hc.budget, Window: hc.window, Limit: hc.limit, Block: hc.block,
		Sinks: hc.sinks, Recent: hc.recent, Reserve: hc.reserve}
}

// withLimits returns hc with the token limits l (policy.ResolveHotLimits).
func (hc hotConfig) withLimits(l policy.HotLimits) hotConfig {
	hc.budget, hc.window, hc.limit, hc.block = l.Budget, l.Window, l.Limit, l.Block
	hc.sinks, hc.recent, hc.reserve = l.Sinks, l.Recent, l.Reserve
	return hc
}

func newHotState() *hotState {
	idx, _ := policy.NewBM25Index(policy.DefaultBM25Options())
	return &hotState{index: idx}
}

func (h *hotState) physEnd(sess *session) int { return h.tailP + len(sess.tape) - h.tailV }

// used counts the tokens in the engine (hot blocks and the tail).
func (h *hotState) used(sess *session) int {
	n := len(sess.tape) - h.tailV
	for _, b := range h.blocks {
		if b.hot {
			n += b.n
		}
	}
	return n
}

// nextSeal is the tape length at which the open tail becomes a block.
func (srv *Server) nextSeal(h *hotState) int {
	hc := srv.slot.hot
	if h.tailV < hc.sinks {
		return hc.sinks
	}
	return h.tailV + hc.block
}

// hotAppend decodes toks after the tape, evicting hot blocks first whenever
// the next chunk would pass the limit, and seals blocks as they fill.
// Eviction frees room for a whole chunk at once (a quarter of the hot
// budget), so prefill runs in large batches and positions are compacted
// once per chunk, not once per block.
func (srv *Server) hotAppend(ctx context.Context, sess *session, toks []engine.Token) error {
	h, hc, ectx := sess.hot, srv.slot.hot, srv.slot.ectx
	batch := ectx.Options().BatchTokens
	chunk := hc.limits().ChunkTokens()
	total := len(toks)
	defer func() { reportProgress(ctx, "prefill", total-len(toks), total) }()
	for len(toks) > 0 {
		reportProgress(ctx, "prefill", total-len(toks), total)
		if len(toks) < total {
			if err := srv.yield(sess); err != nil { // other sessions' turns
				return err
			}
		}
		want := min(len(toks), chunk)
		if free := hc.limit - h.used(sess); free < want {
			if err := srv.evict(sess, want-free); err != nil {
				return err
			}
		}
		end := h.physEnd(sess)
		n := min(len(toks), hc.limit-end, batch)
		if err := ectx.Decode(ctx, toks[:n], end); err != nil {
			sess.logitsAt = -1
			return engineErr(err)
		}
		sess.tape = append(sess.tape, toks[:n]...)
		sess.logitsAt = len(sess.tape)
		toks = toks[n:]
		for len(sess.tape) >= srv.nextSeal(h) {
			srv.seal(sess)
		}
	}
	return nil
}

// seal turns the open tail into a block: its KV is copied to the arena
// (when the arena has room) and its tokens indexed for retrieval.
func (srv *Server) seal(sess *session) {
	h := sess.hot
	n := srv.nextSeal(h) - h.tailV
	var prev shm.Hash
	if k := len(h.blocks); k > 0 {
		prev = h.blocks[k-1].chain
	}
	toks := sess.tape[h.tailV : h.tailV+n]
	b := &hotBlock{
		id: srv.newBlockID(), seq: len(h.blocks), vstart: h.tailV, n: n,
		chain: shm.ChainHash(prev, toks), hot: true, pstart: h.tailP, pos0: h.tailP, lastUsed: h.turn,
	}
	c := policy.ClassifyBlock(segmentSpans(sess.spans), b.vstart, b.vstart+n)
	b.class, b.kind, b.segID, b.pinned = c.Class, c.Kind, c.SegmentID, c.Pinned
	if r, err := srv.slot.ectx.ExtractRange(b.pstart, b.pstart+n); err == nil {
		b.stored = srv.arenaPut(sess, b, toks, r.Blob)
		srv.summarizeSealed(h, b, r)
	} else {
		h.note(fmt.Sprintf("block %d not parked: %v", b.id, err))
	}
	h.index.Add(b.id, toks)
	h.blocks = append(h.blocks, b)
	h.tailV += n
	h.tailP += n
}

// segmentSpans are spans as policy sees them.
func segmentSpans(spans []span) []policy.SegmentSpan {
	out := make([]policy.SegmentSpan, len(spans))
	for i, sp := range spans {
		out[i] = policy.SegmentSpan{Segment: sp.seg, Start: sp.start, End: sp.end}
	}
	return out
}

// arenaPut parks a block's KV, making room by dropping the most evictable
// parked blocks of the session when the arena is full.
func (srv *Server) arenaPut(sess *session, b *hotBlock, toks []engine.Token, kv []byte) bool {
	a := srv.slot.arena
	if a == nil {
		return false
	}
	blk := shm.Block{ID: b.id, Session: sess.id, Chain: b.chain, Class: uint8(b.class), Kind: uint8(b.kind),
		SegID: truncate(b.segID, shm.MaxSegIDLen), Pos: int32(b.pos0), Tokens: toks, KV: kv}
	for {
		err := a.Put(blk)
		if err == nil {
			srv.metrics.arenaParked.Inc()
			return true
		}
		if !errors.Is(err, shm.ErrArenaFull) {
			sess.hot.note(fmt.Sprintf("block %d not parked: %v", b.id, err))
			return false
		}
		if srv.slot.freeOrphan() {
			continue // closed sessions' blocks go first
		}
		victim := srv.arenaVictim(sess)
		if victim == nil {
			sess.hot.note(fmt.Sprintf("arena full: block %d kept only while hot", b.id))
			return false
		}
		if err := srv.spill(sess, victim); err != nil {
			srv.metrics.arenaDropped.Inc()
			sess.hot.note(fmt.Sprintf("arena full: dropped parked block %d (tokens %d..%d, %s); the SSD tier could not take it: %v", victim.id, victim.vstart, victim.vstart+victim.n, victim.class, err))
		}
		a.Delete(victim.id)
		victim.stored = false
	}
}

// spill hands a parked block's KV to the SSD tier before the arena drops
// it: the block stays retrievable (admission reads it back from the SSD).
// Compression and the write run in the tier's background workers; when
// their queue is full the write happens here (back-pressure, not loss).
func (srv *Server) spill(sess *session, b *hotBlock) error {
	if srv.cold == nil {
		return fmt.Errorf("the SSD tier is off: %s", srv.coldOff)
	}
	if err := srv.cold.Err(); err != nil {
		return err
	}
	kv, err := srv.slot.arena.ReadKV(b.id, nil)
	if err != nil {
		return err
	}
	if !b.hasKey {
		b.coldKey, b.hasKey = contentKey(srv.coldCompat(), b.chain, b.pos0, kv), true
	}
	toks := append([]engine.Token(nil), sess.tape[b.vstart:b.vstart+b.n]...)
	meta := coldstore.BlockMeta{Chain: b.chain, Tokens: toks, Pos0: b.pos0,
		ElemBytes: elemBytes(srv.cfg.KVType), Class: uint8(b.class), Segment: b.segID}
	if !srv.cold.Has(b.coldKey) {
		stored := toCold(srv.cfg.Engine.BlobCodec(), kv)
		err := srv.cold.Enqueue(b.coldKey, meta, stored)
		if errors.Is(err, coldstore.ErrQueueFull) {
			err = srv.cold.Put(context.Background(), b.coldKey, meta, stored)
		}
		if err != nil {
			return err
		}
	}
	// The SSD copy is now the block's only one: spare it from the quota's
	// collection while the session may still retrieve it.
	srv.cold.Pin(b.coldKey)
	b.cold = true
	return nil
}

// dropCold forgets a block's SSD copy: the quota may collect it again.
func (srv *Server) dropCold(b *hotBlock) {
	if b.cold && b.hasKey && srv.cold != nil {
		srv.cold.Unpin(b.coldKey)
	}
	b.cold = false
}

// coldKV reads a spilled block back from the SSD tier, waiting for its
// write when it is still queued.
func (srv *Server) coldKV(ctx context.Context, b *hotBlock) ([]byte, error) {
	if srv.cold == nil || !b.cold || !b.hasKey {
		return nil, fmt.Errorf("block %d has no copy in the SSD tier", b.id)
	}
	kv, err := srv.coldGet(ctx, b.coldKey, b.id)
	if errors.Is(err, coldstore.ErrNotFound) {
		if ferr := srv.cold.Flush(ctx); ferr != nil {
			return nil, ferr
		}
		kv, err = srv.coldGet(ctx, b.coldKey, b.id)
	}
	return kv, err
}

// arenaVictim is the session's parked block with KV in the arena that
// policy.SpillVictim moves out first.
func (srv *Server) arenaVictim(sess *session) *hotBlock {
	var cands []policy.HotBlock
	for _, b := range sess.hot.blocks {
		if b.stored && !b.hot {
			cands = append(cands, policy.HotBlock{ID: b.id, Tokens: b.n, Class: b.class, Kind: b.kind, Seq: b.seq, Score: b.score, LastUsed: b.lastUsed})
		}
	}
	if id, ok := policy.SpillVictim(cands); ok {
		return sess.hot.find(id)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func (h *hotState) note(s string) {
	h.diag = append(h.diag, s)
	if len(h.diag) > 32 {
		h.diag = h.diag[len(h.diag)-32:]
	}
}

// planBlocks describes the session's blocks (and its open tail) to the
// planner.
func (srv *Server) planBlocks(sess *session) []policy.HotBlock {
	h := sess.hot
	out := make([]policy.HotBlock, 0, len(h.blocks)+1)
	for _, b := range h.blocks {
		if !b.hot && !b.stored && !b.cold {
			continue // its KV is gone: it can never come back
		}
		out = append(out, policy.HotBlock{
			ID: b.id, Tokens: b.n, Class: b.class, Kind: b.kind, Seq: b.seq, Score: b.score,
			LastUsed: b.lastUsed, Hot: b.hot, Pinned: b.pinned, Sink: b.vstart == 0 && srv.slot.hot.sinks > 0,
		})
	}
	if n := len(sess.tape) - h.tailV; n > 0 {
		out = append(out, policy.HotBlock{ID: tailID, Tokens: n, Class: policy.ClassVolatile, Kind: policy.KindTerminal,
			Seq: len(h.blocks), LastUsed: h.turn, Hot: true, Recent: true, Sink: h.tailV == 0 && srv.slot.hot.sinks > 0})
	}
	return out
}

// evict parks hot blocks freeing at least need tokens, as
// policy.PlanEviction picks them (one call per prefill chunk), and closes
// the holes with compact. Freeing less is fine while some room is left:
// protected blocks fill the rest.
func (srv *Server) evict(sess *session, need int) error {
	h, hc := sess.hot, srv.slot.hot
	blocks := make([]policy.HotBlock, 0, len(h.blocks)+1)
	for _, b := range h.blocks {
		blocks = append(blocks, policy.HotBlock{ID: b.id, Tokens: b.n, Class: b.class, Kind: b.kind, Seq: b.seq, Score: b.score,
			LastUsed: b.lastUsed, Hot: b.hot, Pinned: b.pinned})
	}
	if n := len(sess.tape) - h.tailV; n > 0 {
		blocks = append(blocks, policy.HotBlock{ID: tailID, Tokens: n, Class: policy.ClassVolatile, Kind: policy.KindTerminal,
			Seq: len(h.blocks), LastUsed: h.turn, Hot: true, Recent: true})
	}
	plan := policy.PlanEviction(policy.EvictInput{Blocks: blocks, SinkTokens: hc.sinks, RecentTokens: hc.recent, NeedTokens: need})
	for _, id := range plan.Unpinned {
		b := h.find(id)
		b.pinned = false
		h.note(fmt.Sprintf("pinned segments exceed the hot budget %d: block %d (%s) unpinned", hc.limit, b.id, b.segID))
	}
	for _, id := range plan.Evict {
		b := h.find(id)
		if _, err := srv.slot.ectx.Remove(b.pstart, b.pstart+b.n); err != nil {
			return engineErr(err)
		}
		b.hot, b.retrieved = false, false
		h.evictions++
		srv.metrics.evictions.Inc()
	}
	if len(plan.Evict) > 0 {
		if err := srv.compact(sess); err != nil {
			return err
		}
	}
	if hc.limit-h.used(sess) <= 0 {
		return fmt.Errorf("%w: the hot budget of %d tokens holds only protected tokens (sinks %d, recent window %d, tail %d)",
			protocol.ErrResourceExhausted, hc.limit, hc.sinks, hc.recent, len(sess.tape)-h.tailV)
	}
	return nil
}

// compact shifts hot ranges down so they tile [0, physEnd) again.
func (srv *Server) compact(sess *session) error {
	h := sess.hot
	type rng struct {
		b     *hotBlock // nil: the tail
		start int
		n     int
	}
	var rs []rng
	for _, b := range h.blocks {
		if b.hot {
			rs = append(rs, rng{b, b.pstart, b.n})
		}
	}
	if n := len(sess.tape) - h.tailV; n > 0 {
		rs = append(rs, rng{nil, h.tailP, n})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].start < rs[j].start })
	next := 0
	for _, r := range rs {
		if r.start != next {
			if err := srv.slot.ectx.Shift(r.start, r.start+r.n, next-r.start); err != nil {
				return engineErr(err)
			}
			sess.logitsAt = -1
		}
		if r.b != nil {
			r.b.pstart = next
		} else {
			h.tailP = next
		}
		next += r.n
	}
	if len(sess.tape)-h.tailV == 0 {
		h.tailP = next
	}
	return nil
}

// hotTruncate keeps tape[:n] (rounded down to a block boundary when n falls
// inside a sealed block) and returns the length kept.
func (srv *Server) hotTruncate(sess *session, n int) (int, error) {
	h, ectx := sess.hot, srv.slot.ectx
	if n >= len(sess.tape) {
		return len(sess.tape), nil
	}
	if n >= h.tailV {
		p := h.tailP + (n - h.tailV)
		if _, err := ectx.Remove(p, -1); err != nil {
			return 0, engineErr(err)
		}
		sess.truncate(n)
		return n, nil
	}
	k := sort.Search(len(h.blocks), func(i int) bool { return h.blocks[i].vstart+h.blocks[i].n > n })
	keep := h.blocks[k].vstart
	for _, b := range h.blocks[k:] {
		if b.hot {
			if _, err := ectx.Remove(b.pstart, b.pstart+b.n); err != nil {
				return 0, engineErr(err)
			}
		}
		if b.stored && srv.slot.arena != nil {
			srv.slot.deleteBlock(b.id)
		}
		srv.dropCold(b)
		h.index.Remove(b.id)
		h.forgetSummary(b.id)
	}
	if len(sess.tape) > h.tailV {
		if _, err := ectx.Remove(h.tailP, h.tailP+len(sess.tape)-h.tailV); err != nil {
			return 0, engineErr(err)
		}
	}
	h.blocks = h.blocks[:k]
	h.tailV = keep
	sess.truncate(keep)
	if err := srv.compact(sess); err != nil {
		return 0, err
	}
	return keep, nil
}

// hotSync is sync for hot-set mode: keep the common prefix, then stream
// the rest in; with retrieve, parked blocks relevant to the new tokens are
// brought back first (once per turn, in bulk).
func (srv *Server) hotSync(ctx context.Context, sess *session, target prompt, needLogits, keepTail, retrieve bool) (syncResult, error) {
	r := syncResult{promptTokens: len(target.tokens)}
	limit := srv.slot.sessionTokens()
	if len(target.tokens) > limit {
		return r, protocol.OverflowError{PromptTokens: int64(len(target.tokens)), ContextTokens: int64(limit)}
	}
	lcp := sess.reusablePrefix(target.tokens)
	r.reusable = lcp
	if lcp == len(target.tokens) && keepTail && !needLogits {
		r.reused = lcp
		return r, nil
	}
	keep := lcp
	if needLogits && keep == len(target.tokens) && keep > 0 && sess.logitsAt != keep {
		keep--
	}
	before := len(sess.tape)
	kept, err := srv.hotTruncate(sess, keep)
	if err != nil {
		return r, err
	}
	r.dropped = before - kept
	r.reused = kept
	sess.spans = target.spans
	newToks := target.tokens[kept:]
	if retrieve && len(newToks) > 0 {
		sess.hot.turn++
		var turn []engine.Token
		if target.turn > 0 && target.turn < len(target.tokens) {
			turn = target.tokens[target.turn:]
		}
		if err := srv.retrieveFor(ctx, sess, newToks, turn); err != nil {
			return r, err
		}
	}
	if err := srv.hotAppend(ctx, sess, newToks); err != nil {
		sess.spans = clipSpans(target.spans, len(sess.tape))
		r.prefilled = len(sess.tape) - kept
		return r, err
	}
	r.prefilled = len(newToks)
	return r, nil
}

// retrieveFor scores the parked blocks against what the turn brings (its
// own segments, else the new tokens; policy.TurnQuery decides), plans the
// hot set and moves blocks accordingly.
func (srv *Server) retrieveFor(ctx context.Context, sess *session, newToks, turn []engine.Token) error {
	h, hc := sess.hot, srv.slot.hot
	if len(h.blocks) == 0 {
		return nil
	}
	suffix := hc.limits().TurnSuffixTokens(len(newToks))
	for _, b := range h.blocks {
		b.score, b.reason = 0, ""
	}
	rep := &retrievalReport{turn: h.turn, scorers: hc.scorers}
	if hc.scorers != policy.ScorerNone {
		query := policy.TurnQuery(policy.TurnQueryInput{Turn: turn, New: newToks, MaxTokens: hc.limit})
		rep.queryTokens = len(query)
		var scores []policy.BlockScore
		if hc.scorers.Has(policy.ScorerLexical) {
			start := time.Now()
			scores = h.index.Score(query)
			rep.add("lexical", time.Since(start), scores, h.index.Len(), 0)
		}
		if hc.scorers.Has(policy.ScorerAttention) {
			var err error
			if scores, err = srv.attentionRank(ctx, sess, query, scores, rep); err != nil {
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
		HotBudget: hc.limit, SinkTokens: hc.sinks, RecentTokens: policy.TurnRecentTokens(hc.recent, len(newToks)), SuffixTokens: suffix,
		TrainedWindow: hc.window, MinScore: math.SmallestNonzeroFloat64,
	}
	if hc.scorers == policy.ScorerNone {
		in.MinScore = math.Inf(1) // nothing is retrieved
	}
	in.Blocks = srv.planBlocks(sess)
	plan, err := policy.PlanHotSetUnpinning(in)
	if plan.Unpinned != nil {
		h.note(fmt.Sprintf("pinned segments do not fit the hot budget (%v): planning without pins", plan.Unpinned))
	}
	if err != nil {
		return fmt.Errorf("%w: %v", protocol.ErrResourceExhausted, err)
	}
	rep.budgetTokens = plan.Limit - in.SuffixTokens - plan.ProtectedTokens
	rep.admitted = map[uint64]bool{}
	for _, e := range plan.Layout {
		if e.Role == policy.RoleRetrieved {
			rep.admitted[e.ID] = true
		}
	}
	if err := srv.applyPlan(sess, plan); err != nil {
		return err
	}
	h.plan, h.retrieval = &plan, rep
	return nil
}

func (h *hotState) find(id uint64) *hotBlock {
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
// the plan's layout.
func (srv *Server) applyPlan(sess *session, plan policy.HotSetPlan) error {
	h, ectx := sess.hot, srv.slot.ectx
	sess.logitsAt = -1
	for _, id := range plan.Evict {
		b := h.find(id)
		if b == nil || !b.hot {
			continue
		}
		if _, err := ectx.Remove(b.pstart, b.pstart+b.n); err != nil {
			return engineErr(err)
		}
		b.hot, b.retrieved = false, false
		h.evictions++
		srv.metrics.evictions.Inc()
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
		moves = append(moves, move{b: b, from: b.pstart, to: e.Start, n: b.n, admit: !b.hot, role: e.Role, reason: e.Reason})
	}
	// Park kept ranges far up, bring admitted blocks in, then settle.
	for _, m := range moves {
		if !m.admit && m.from != tempBase+m.to {
			if err := ectx.Shift(m.from, m.from+m.n, tempBase+m.to-m.from); err != nil {
				return engineErr(err)
			}
		}
	}
	var kv []byte
	for _, m := range moves {
		if !m.admit {
			continue
		}
		var err error
		if m.b.stored {
			kv, err = srv.readParkedKV(m.b.id, kv[:0])
		} else {
			kv, err = srv.coldKV(context.Background(), m.b)
		}
		if err != nil {
			if m.b.stored {
				m.b.stored = false
			} else {
				srv.dropCold(m.b)
			}
			h.note(fmt.Sprintf("block %d unreadable: %v", m.b.id, err))
			continue
		}
		if err := srv.insertFetched(m.b.id, engine.Range{Pos0: m.b.pos0, Count: m.b.n, Blob: kv}, m.to); err != nil {
			// Bytes the engine refuses are as good as lost; the layout
			// closes over the hole below, so the KV stays consistent.
			if m.b.stored {
				srv.slot.deleteBlock(m.b.id)
			}
			m.b.stored = false
			srv.dropCold(m.b)
			h.note(fmt.Sprintf("block %d refused by the engine on admission: %v", m.b.id, err))
			continue
		}
		m.b.hot = true
		m.b.pstart = m.to
		h.admissions++
		srv.metrics.admissions.Inc()
	}
	for _, m := range moves {
		if m.admit {
			continue
		}
		if err := ectx.Shift(tempBase+m.to, tempBase+m.to+m.n, -tempBase); err != nil {
			return engineErr(err)
		}
		if m.b != nil {
			m.b.pstart = m.to
		} else {
			h.tailP = m.to
		}
	}
	for _, m := range moves {
		if m.b != nil {
			m.b.retrieved = m.role == policy.RoleRetrieved
			m.b.reason = m.reason
			if m.b.retrieved {
				m.b.lastUsed = h.turn
			}
		}
	}
	if len(sess.tape) == h.tailV {
		h.tailP = plan.SuffixStart
	}
	// A block the arena could not return leaves a hole: close it.
	return srv.compact(sess)
}

func (srv *Server) newBlockID() uint64 {
	srv.slot.nextBlock++
	return srv.slot.nextBlock
}
