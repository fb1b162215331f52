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
