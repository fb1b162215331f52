package layout

import (
	"fmt"
	"sort"

	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
)

// Making room in the engine while a prompt streams in: the blocks policy
// picks are evicted (their KV stays parked) and the rest compacted down.

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
	if n := len(h.tape.tokens) - h.tailV; n > 0 {
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
	if n := len(h.tape.tokens) - h.tailV; n > 0 {
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
			protocol.ErrResourceExhausted, hc.Limit, hc.Sinks, hc.Recent, len(h.tape.tokens)-h.tailV)
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
	if n := len(tape.tokens) - h.tailV; n > 0 {
		rs = append(rs, rng{nil, h.tailP, n})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].start < rs[j].start })
	next := 0
	for _, r := range rs {
		if r.start != next {
			if err := h.env.Engine.Shift(r.start, r.start+r.n, next-r.start); err != nil {
				return EngineErr(err)
			}
			tape.logitsAt = -1
		}
		if r.b != nil {
			r.b.pstart = next
		} else {
			h.tailP = next
		}
		next += r.n
	}
	if len(tape.tokens)-h.tailV == 0 {
		h.tailP = next
	}
	return nil
}
