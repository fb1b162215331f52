package policy

import (
	"math/rand"
	"slices"
	"testing"
)

func TestPlanAdoption(t *testing.T) {
	stream := func(lens ...int) []HotBlock {
		var bs []HotBlock
		for i, n := range lens {
			bs = append(bs, blk(uint64(i+1), i, n, 0))
		}
		return bs
	}
	pinned := stream(4, 64, 64, 64, 64, 64)
	pinned[2] = pinned[2].pinned()
	for _, tc := range []struct {
		name string
		in   AdoptInput
		want []uint64
	}{
		{"sink and recent", AdoptInput{Blocks: stream(4, 64, 64, 64, 64), SinkTokens: 4, RecentTokens: 128, RoomTokens: 1000}, []uint64{1, 4, 5}},
		{"recent stops at a block that does not fit the window", AdoptInput{Blocks: stream(4, 64, 64, 64, 64), SinkTokens: 4, RecentTokens: 100, RoomTokens: 1000}, []uint64{1, 5}},
		{"room bounds everything", AdoptInput{Blocks: stream(4, 64, 64, 64, 64), SinkTokens: 4, RecentTokens: 128, RoomTokens: 70}, []uint64{1, 5}},
		{"pinned first", AdoptInput{Blocks: pinned, SinkTokens: 4, RecentTokens: 256, RoomTokens: 200}, []uint64{1, 3, 5, 6}},
		{"recent stops at a chosen block", AdoptInput{Blocks: stream(4, 64), SinkTokens: 4, RecentTokens: 1000, RoomTokens: 1000}, []uint64{1, 2}},
		{"no sinks", AdoptInput{Blocks: stream(64, 64, 64), RecentTokens: 64, RoomTokens: 1000}, []uint64{3}},
		{"flagged sink", AdoptInput{Blocks: []HotBlock{blk(1, 0, 8, 0).sink(), blk(2, 1, 64, 0)}, RoomTokens: 1000}, []uint64{1}},
	} {
		if got := PlanAdoption(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Adopted blocks fit the room, come in Seq order, and the plan does not
// depend on the order of blocks.
func TestPlanAdoptionProperties(t *testing.T) {
	r := rand.New(rand.NewSource(12))
	for range 3000 {
		h := randomHotSetInput(r)
		in := AdoptInput{Blocks: h.Blocks, SinkTokens: h.SinkTokens, RecentTokens: h.RecentTokens, RoomTokens: r.Intn(500)}
		got := PlanAdoption(in)
		byID := map[uint64]HotBlock{}
		for _, b := range in.Blocks {
			byID[b.ID] = b
		}
		used, lastSeq := 0, -1
		for _, id := range got {
			b := byID[id]
			if b.Seq <= lastSeq {
				t.Fatalf("%v not in Seq order", got)
			}
			lastSeq = b.Seq
			used += b.Tokens
		}
		if used > in.RoomTokens {
			t.Fatalf("adopted %d tokens, room %d", used, in.RoomTokens)
		}
		in.Blocks = slices.Clone(in.Blocks)
		slices.Reverse(in.Blocks)
		if again := PlanAdoption(in); !slices.Equal(got, again) {
			t.Fatalf("order-dependent: %v vs %v", got, again)
		}
	}
}
