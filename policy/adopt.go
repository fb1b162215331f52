package policy

import (
	"cmp"
	"slices"
)

// AdoptInput is what PlanAdoption needs: the parked blocks of a stream a
// new session takes over (an orphan tape: blocks of a closed session or of
// an earlier daemon) and the room the engine has for them.
type AdoptInput struct {
	// Blocks are the stream's blocks in any order; laid end to end in Seq
	// order they are the stream.
	Blocks []HotBlock
	// SinkTokens and RecentTokens place the sinks and the recent window as
	// in HotSetInput; blocks flagged Sink count as sinks too.
	SinkTokens, RecentTokens int
	// RoomTokens is how many tokens may come back (HotLimits.AdoptRoom).
	RoomTokens int
}

// PlanAdoption returns the IDs of the blocks to bring back into the
// engine, in Seq order: first the sinks and pinned blocks, each while it
// fits the room; then, from the end of the stream backwards, whole blocks
// while they fit both the recent window and the room, stopping at the first
// that does not or that is already chosen. The rest stay parked until a
// turn retrieves them.
func PlanAdoption(in AdoptInput) []uint64 {
	blocks := slices.Clone(in.Blocks)
	slices.SortFunc(blocks, func(a, b HotBlock) int { return cmp.Compare(a.Seq, b.Seq) })
	room := in.RoomTokens
	want := make([]bool, len(blocks))
	off := 0
	for k, b := range blocks {
		if (b.Sink || off < in.SinkTokens || b.Pinned) && b.Tokens <= room {
			want[k], room = true, room-b.Tokens
		}
		off += b.Tokens
	}
	recent := 0
	for k := len(blocks) - 1; k >= 0 && recent < in.RecentTokens; k-- {
		b := blocks[k]
		if want[k] || recent+b.Tokens > in.RecentTokens || b.Tokens > room {
			break
		}
		want[k], room, recent = true, room-b.Tokens, recent+b.Tokens
	}
	var ids []uint64
	for k, b := range blocks {
		if want[k] {
			ids = append(ids, b.ID)
		}
	}
	return ids
}
