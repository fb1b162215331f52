package layout

import (
	"context"
	"fmt"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/sidecar/internal/snapshot"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// A turn's start, remembered: a hot set is path-dependent (the blocks
// evicted while a reply is generated stay evicted when the reply is cut
// away), so at the end of each turn's prompt (a Sync that leaves logits:
// the point decoding starts from) the layout is remembered, and a cut
// back to exactly that point lays the hot set out as it was there
// (policy.ChooseTurnLayout decides): the same blocks hot at the same
// positions, the same open tail, the same retrieval figures, and the last
// token's logits recomputed in place. A repeated request, and a session
// resumed from a snapshot that holds the reply (snapshots carry the
// mark), then answer as the turn first did.

// turnMark is the layout at the start of a turn.
type turnMark struct {
	at           int // tape length: the end of the turn's prompt
	tailV, tailP int
	turn         int64
	blocks       []markedBlock // the blocks then, in order
	plan         *policy.HotSetPlan
	retrieval    *retrievalReport
	shortfall    bool // the layout then lacked blocks its plan named (unreadable)
}

// markedBlock is what a block was at the mark.
type markedBlock struct {
	id        uint64
	hot       bool
	pstart    int
	lastUsed  int64
	score     float64
	reason    string
	retrieved bool
	pinned    bool
}

// markTurn remembers the layout now as the start of a turn.
func (h *hotSet) markTurn() {
	m := &turnMark{at: len(h.tape.tokens), tailV: h.tailV, tailP: h.tailP, turn: h.turn, plan: h.plan, retrieval: h.retrieval, shortfall: h.shortfall}
	m.blocks = make([]markedBlock, len(h.blocks))
	for i, b := range h.blocks {
		m.blocks[i] = markedBlock{id: b.id, hot: b.res.inEngine(), pstart: b.pstart, lastUsed: b.lastUsed, score: b.score,
			reason: b.reason, retrieved: b.retrieved, pinned: b.pinned}
	}
	h.mark = m
}

// turnChoice is policy's answer for a cut to n.
func (h *hotSet) turnChoice(n int) policy.TurnLayoutChoice {
	m := h.mark
	in := policy.TurnLayoutInput{CutAt: n, TapeTokens: len(h.tape.tokens), MarkAt: -1}
	if m == nil || len(h.blocks) < len(m.blocks) {
		return policy.ChooseTurnLayout(in)
	}
	in.MarkAt = m.at
	in.MarkShortfall = m.shortfall
	in.MarkTailTokens = m.at - m.tailV
	switch {
	case len(h.blocks) == len(m.blocks):
		in.MarkTailInEngine = true // still the open tail
	default:
		in.MarkTailInEngine = h.blocks[len(m.blocks)].res.inEngine()
	}
	for i, mb := range m.blocks {
		b := h.blocks[i]
		if b.id != mb.id {
			return policy.ChooseTurnLayout(policy.TurnLayoutInput{CutAt: n, TapeTokens: len(h.tape.tokens), MarkAt: -1})
		}
		if mb.hot && !b.res.inEngine() && b.res.copyTier() == tiers.None {
			in.LostBlocks++
		}
	}
	return policy.ChooseTurnLayout(in)
}

// restoreTurn cuts the tape back to the mark and lays the hot set out as
// it was there. The KV stays equal to the tape on failure.
func (h *hotSet) restoreTurn(ctx context.Context) error {
	m, tape, ectx := h.mark, h.tape, h.env.Engine
	k := len(m.blocks)
	tailN := m.at - m.tailV
	// What came after the mark leaves: the blocks sealed since (the first
	// keeps the turn's open tail, which becomes the tail again) and the
	// tail.
	newTailP := -1
	for i, b := range h.blocks[k:] {
		if b.res.inEngine() {
			from := b.pstart
			if i == 0 && tailN > 0 {
				from, newTailP = b.pstart+tailN, b.pstart
			}
			if _, err := ectx.Remove(from, b.pstart+b.n); err != nil {
				return h.cutFailed(EngineErr(err))
			}
		}
		h.dropCopy(b)
		h.index.Remove(b.id)
		h.forgetSummary(b.id)
	}
	if len(h.blocks) == k {
		newTailP = h.tailP
		if _, err := ectx.Remove(h.tailP+tailN, -1); err != nil {
			return h.cutFailed(EngineErr(err))
		}
	} else if n := len(tape.tokens) - h.tailV; n > 0 {
		if _, err := ectx.Remove(h.tailP, h.tailP+n); err != nil {
			return h.cutFailed(EngineErr(err))
		}
	}
	h.blocks = h.blocks[:k]
	h.tailV = m.tailV
	if tailN > 0 {
		h.tailP = newTailP
	}
	tape.Keep(m.at)
	tape.logitsAt = -1
	// The mark's layout, as a plan: every block hot then at its position,
	// the tail after them.
	plan := policy.HotSetPlan{SuffixStart: m.tailP}
	for i, mb := range m.blocks {
		b := h.blocks[i]
		if !mb.hot {
			if b.res.inEngine() {
				plan.Evict = append(plan.Evict, b.id)
			}
			continue
		}
		plan.Layout = append(plan.Layout, policy.LayoutEntry{ID: b.id, Start: mb.pstart, Tokens: b.n, Seq: b.seq, Reason: mb.reason})
	}
	if tailN > 0 {
		plan.Layout = append(plan.Layout, policy.LayoutEntry{ID: tailID, Start: m.tailP, Tokens: tailN})
	}
	if err := h.applyPlan(ctx, plan); err != nil {
		return err
	}
	for i, mb := range m.blocks {
		b := h.blocks[i]
		b.lastUsed, b.score, b.reason, b.retrieved, b.pinned = mb.lastUsed, mb.score, mb.reason, mb.retrieved && b.res.inEngine(), mb.pinned
	}
	h.turn, h.plan, h.retrieval, h.shortfall = m.turn, m.plan, m.retrieval, m.shortfall
	// The last token's logits, recomputed where it lies: the end of the
	// layout, as when the turn's prompt was decoded.
	if p, _, ok := h.enginePos(m.at - 1); ok && m.at > 0 && p == h.physEnd()-1 {
		if _, err := ectx.Remove(p, p+1); err != nil {
			return EngineErr(err)
		}
		if err := ectx.Decode(ctx, []engine.Token{tape.tokens[m.at-1]}, p); err != nil {
			// The cell is gone: drop the token so tape and KV agree.
			return h.dropLast(ctx, EngineErr(err))
		}
		tape.logitsAt = m.at
	}
	h.note(fmt.Sprintf("cut back to the start of turn %d at token %d: its hot layout restored", m.turn, m.at))
	return nil
}

// cutFailed forgets the mark after a failed removal: the layout is what
// the engine holds, which Cut's callers clear on error.
func (h *hotSet) cutFailed(err error) error {
	h.mark = nil
	return err
}

// dropLast drops the tape's last token, whose cell is gone, and returns
// err.
func (h *hotSet) dropLast(ctx context.Context, err error) error {
	tape := h.tape
	n := len(tape.tokens) - 1
	if n >= h.tailV {
		tape.Keep(n)
		return err
	}
	// It was in the last sealed block: the block's other tokens become the
	// open tail, as Cut does.
	if _, cerr := h.cut(ctx, n); cerr != nil {
		return fmt.Errorf("%w (and cutting back: %w)", err, cerr)
	}
	return err
}

// saved is the mark as a snapshot keeps it, nil when there is none or it
// does not describe a session of blocks and tape tokens (it always does).
func (m *turnMark) saved(blocks, tape int) *snapshot.TurnMark {
	if m == nil || len(m.blocks) > blocks || m.at > tape {
		return nil
	}
	out := &snapshot.TurnMark{At: m.at, TailV: m.tailV, TailP: m.tailP, Turn: m.turn, Shortfall: m.shortfall, Blocks: make([]snapshot.MarkBlock, len(m.blocks))}
	for i, mb := range m.blocks {
		out.Blocks[i] = snapshot.MarkBlock{Hot: mb.hot, PStart: mb.pstart, LastUsed: mb.lastUsed, Score: mb.score, Reason: mb.reason,
			Retrieved: mb.retrieved, Pinned: mb.pinned}
	}
	return out
}

// loadMark is a snapshot's mark over the restored blocks, nil when there
// is none or it does not fit them (a damaged or foreign snapshot: the
// session then cuts as usual, fail-closed).
func loadMark(sm *snapshot.TurnMark, blocks []*hotBlock, tape int) *turnMark {
	if sm == nil || len(sm.Blocks) > len(blocks) || sm.At <= 0 || sm.At > tape || sm.TailV < 0 || sm.TailV > sm.At || sm.TailP < 0 {
		return nil
	}
	end := 0
	if k := len(sm.Blocks); k > 0 {
		end = blocks[k-1].vstart + blocks[k-1].n
	}
	if end != sm.TailV {
		return nil
	}
	m := &turnMark{at: sm.At, tailV: sm.TailV, tailP: sm.TailP, turn: sm.Turn, shortfall: sm.Shortfall, blocks: make([]markedBlock, len(sm.Blocks))}
	for i, mb := range sm.Blocks {
		if mb.PStart < 0 {
			return nil
		}
		m.blocks[i] = markedBlock{id: blocks[i].id, hot: mb.Hot, pstart: mb.PStart, lastUsed: mb.LastUsed, score: mb.Score,
			reason: mb.Reason, retrieved: mb.Retrieved, pinned: mb.Pinned}
	}
	return m
}
