package layout

import (
	"fmt"
	"sort"
)

// Check verifies a layout's invariants against the engine, which holds
// engineUsed tokens: a dense tape is all in the engine; a hot set's blocks
// partition the tape before its tail, in order, and the engine's ranges
// (hot blocks and the tail) tile [0, physEnd) exactly, within the limit.
// Tests call it after every step that moves KV.
func Check(l Layout, engineUsed int) error {
	switch x := l.(type) {
	case *denseLayout:
		if n := len(x.tape.tokens); engineUsed != n {
			return fmt.Errorf("dense: the engine holds %d tokens, the tape %d", engineUsed, n)
		}
		return nil
	case *hotSet:
		return x.check(engineUsed)
	}
	return fmt.Errorf("unknown layout %T", l)
}

func (h *hotSet) check(engineUsed int) error {
	type r struct{ start, n int }
	var rs []r
	v := 0
	for _, b := range h.blocks {
		if b.vstart != v {
			return fmt.Errorf("block %d starts at tape index %d, want %d", b.id, b.vstart, v)
		}
		v += b.n
		if b.res.inEngine() {
			rs = append(rs, r{b.pstart, b.n})
		}
	}
	if v != h.tailV {
		return fmt.Errorf("blocks cover %d tokens, the tail starts at %d", v, h.tailV)
	}
	if n := len(h.tape.tokens) - h.tailV; n > 0 {
		rs = append(rs, r{h.tailP, n})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].start < rs[j].start })
	next := 0
	for _, x := range rs {
		if x.start != next {
			return fmt.Errorf("hot ranges do not tile: a range at %d, expected %d (%v)", x.start, next, rs)
		}
		next += x.n
	}
	if next != h.physEnd() || next > h.env.Hot.Limit {
		return fmt.Errorf("physEnd %d, ranges tile %d, limit %d", h.physEnd(), next, h.env.Hot.Limit)
	}
	if engineUsed != next {
		return fmt.Errorf("the engine holds %d tokens, the hot set %d", engineUsed, next)
	}
	return nil
}
