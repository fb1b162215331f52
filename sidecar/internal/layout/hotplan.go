package layout

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// A turn's retrieval: the parked blocks are scored against what the turn
// brings, policy plans the hot set, and the blocks are moved to match.

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

// applyPlan evicts, moves and admits blocks so the engine holds exactly
// the plan's layout. A block whose copy cannot be read (a failure or ctx
// ending) stays where it was and is not admitted; the layout closes over
// its hole, and a cancelled ctx is reported once the layout is settled.
func (h *hotSet) applyPlan(ctx context.Context, plan policy.HotSetPlan) error {
	tape, ectx, t := h.tape, h.env.Engine, h.env.Tiers
	tape.logitsAt = -1
	h.shortfall = false
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
			h.shortfall = true
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
			h.shortfall = true
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
	if len(tape.tokens) == h.tailV {
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
