package policy

import (
	"cmp"
	"slices"
)

// EvictionOrder returns the IDs of blocks in the order they should be
// evicted, first to go first. PlanHotSet uses it for HotSetPlan.Evict, and
// callers use it when the host-RAM arena itself is full.
//
// The order: unprotected blocks before protected ones (flagged Sink, Pinned
// or Recent); then by class, volatile before repo_map before task_pinned
// (EffectiveClass().EvictionRank(); a block with no effective class ranks
// first); then lowest Score (NaN lowest); then least recently used; then
// lower Seq; then lower ID. The result does not depend on the order of
// blocks; duplicates are kept.
func EvictionOrder(blocks []HotBlock) []uint64 {
	sorted := slices.Clone(blocks)
	slices.SortFunc(sorted, compareEviction)
	ids := make([]uint64, len(sorted))
	for i, b := range sorted {
		ids[i] = b.ID
	}
	return ids
}

// compareEviction orders a before b when a should be evicted first.
func compareEviction(a, b HotBlock) int {
	if c := cmp.Compare(protectedFlag(a), protectedFlag(b)); c != 0 {
		return c
	}
	if c := cmp.Compare(a.EffectiveClass().EvictionRank(), b.EffectiveClass().EvictionRank()); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Score, b.Score); c != 0 {
		return c
	}
	if c := cmp.Compare(a.LastUsed, b.LastUsed); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Seq, b.Seq); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// protectedFlag is 1 for blocks flagged Sink, Pinned or Recent, else 0.
func protectedFlag(b HotBlock) int {
	if b.Sink || b.Pinned || b.Recent {
		return 1
	}
	return 0
}

// EvictInput is what PlanEviction needs: a session's blocks while a
// prefill streams in, and how many tokens the next chunk needs freed.
type EvictInput struct {
	// Blocks are all of the session's blocks, hot and parked, the open
	// tail included (flagged Recent), in any order: laid end to end in Seq
	// order they are the stream, which places the sinks and the recent
	// window.
	Blocks []HotBlock
	// SinkTokens and RecentTokens protect, besides blocks flagged Sink or
	// Recent, the blocks overlapping the first SinkTokens and the last
	// RecentTokens tokens of the stream, as in HotSetInput.
	SinkTokens, RecentTokens int
	// NeedTokens is how many tokens to free; 0 or less frees nothing.
	NeedTokens int
}

// EvictPlan is the outcome of PlanEviction.
type EvictPlan struct {
	// Evict are the hot blocks to park, first to go first.
	Evict []uint64
	// Unpinned are the pinned blocks (a subset of Evict) that lose their
	// pin to make room, because pinned segments exceed the budget.
	Unpinned []uint64
	// FreedTokens are the tokens of Evict; less than NeedTokens when only
	// protected tokens are left.
	FreedTokens int
}

// PlanEviction picks the hot blocks to park so that at least NeedTokens
// tokens are freed, in one call per prefill chunk.
//
// A hot block is protected when it is a sink, pinned or in the recent
// window (the roles PlanHotSet keeps). Unprotected hot blocks go first, in
// EvictionOrder. When they do not free enough, pinned hot blocks that are
// neither sinks nor recent are unpinned and evicted, oldest (lowest Seq)
// first: pinned segments larger than the budget lose their pin rather than
// fail the prefill. Sinks and the recent window are never evicted; the plan
// then frees less than asked and the caller uses what is free.
func PlanEviction(in EvictInput) EvictPlan {
	var p EvictPlan
	if in.NeedTokens <= 0 {
		return p
	}
	blocks := slices.Clone(in.Blocks)
	slices.SortFunc(blocks, func(a, b HotBlock) int { return cmp.Compare(a.Seq, b.Seq) })
	roles := protectedRoles(blocks, in.SinkTokens, in.RecentTokens)
	total := 0
	for _, b := range blocks {
		total += b.Tokens
	}
	var free, pinned []HotBlock
	end := 0
	for i, b := range blocks {
		end += b.Tokens
		recent := b.Recent || in.RecentTokens > 0 && end > total-in.RecentTokens
		switch {
		case !b.Hot:
		case roles[i] == 0:
			free = append(free, b)
		case roles[i] == RolePinned && !recent:
			pinned = append(pinned, b) // in Seq order: oldest first
		}
	}
	slices.SortFunc(free, compareEviction)
	for _, b := range free {
		if p.FreedTokens >= in.NeedTokens {
			return p
		}
		p.Evict = append(p.Evict, b.ID)
		p.FreedTokens += b.Tokens
	}
	for _, b := range pinned {
		if p.FreedTokens >= in.NeedTokens {
			return p
		}
		p.Evict = append(p.Evict, b.ID)
		p.Unpinned = append(p.Unpinned, b.ID)
		p.FreedTokens += b.Tokens
	}
	return p
}

// SpillVictim is the parked block to move out of a full host-RAM arena
// first (to the SSD tier, or dropped), among blocks, the parked blocks
// whose KV the arena holds: the first in EvictionOrder, where a parked
// block's flags do not protect it (it is not in the engine either way).
// Hot blocks are skipped; false when no block is left.
func SpillVictim(blocks []HotBlock) (uint64, bool) {
	var cands []HotBlock
	for _, b := range blocks {
		if !b.Hot {
			b.Sink, b.Pinned, b.Recent = false, false, false
			cands = append(cands, b)
		}
	}
	if order := EvictionOrder(cands); len(order) > 0 {
		return order[0], true
	}
	return 0, false
}
