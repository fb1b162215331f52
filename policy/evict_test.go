package policy

import (
	"math/rand"
	"slices"
	"testing"
)

func TestPlanEviction(t *testing.T) {
	tail := HotBlock{ID: 99, Seq: 9, Tokens: 10, Hot: true, Recent: true}
	for _, tc := range []struct {
		name         string
		in           EvictInput
		evict, unpin []uint64
		freed        int
	}{
		{"nothing needed", EvictInput{Blocks: base(blk(5, 5, 64, 0).hot()), NeedTokens: 0}, nil, nil, 0},
		{"by score then age", EvictInput{Blocks: []HotBlock{
			blk(1, 1, 64, 3).hot(), blk(2, 2, 64, 1).hot(), blk(3, 3, 64, 1).hot().used(-1), blk(4, 4, 64, 0), tail,
		}, NeedTokens: 100}, []uint64{3, 2}, nil, 128},
		{"class first", EvictInput{Blocks: []HotBlock{
			blk(1, 1, 64, 0).hot().class(ClassRepoMap), blk(2, 2, 64, 9).hot(), tail,
		}, NeedTokens: 1}, []uint64{2}, nil, 64},
		{"sinks and recent by position", EvictInput{Blocks: []HotBlock{
			blk(1, 0, 4, 0).hot(), blk(2, 1, 64, 0).hot(), blk(3, 2, 64, 0).hot(), tail,
		}, SinkTokens: 4, RecentTokens: 20, NeedTokens: 1000}, []uint64{2}, nil, 64},
		{"pinned unpinned oldest first, not in the recent window", EvictInput{Blocks: []HotBlock{
			blk(1, 1, 64, 0).hot().pinned(), blk(2, 2, 64, 0).hot().pinned(), blk(3, 3, 64, 0).hot().pinned(), tail,
		}, RecentTokens: 20, NeedTokens: 65}, []uint64{1, 2}, []uint64{1, 2}, 128},
		{"short: only protected left", EvictInput{Blocks: []HotBlock{blk(1, 0, 64, 0).hot().sink(), tail}, NeedTokens: 10}, nil, nil, 0},
	} {
		p := PlanEviction(tc.in)
		if !slices.Equal(p.Evict, tc.evict) || !slices.Equal(p.Unpinned, tc.unpin) || p.FreedTokens != tc.freed {
			t.Errorf("%s: got %+v, want evict %v unpin %v freed %d", tc.name, p, tc.evict, tc.unpin, tc.freed)
		}
	}
}

// Victims are hot, unprotected before pinned, never sinks or recent, in
// EvictionOrder; the plan stops as soon as enough is freed; it does not
// depend on the order of blocks.
func TestPlanEvictionProperties(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	for range 3000 {
		h := randomHotSetInput(r)
		in := EvictInput{Blocks: h.Blocks, SinkTokens: h.SinkTokens, RecentTokens: h.RecentTokens, NeedTokens: r.Intn(400) - 20}
		p := PlanEviction(in)
		shuffled := slices.Clone(in.Blocks)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		in2 := in
		in2.Blocks = shuffled
		if q := PlanEviction(in2); !slices.Equal(p.Evict, q.Evict) || !slices.Equal(p.Unpinned, q.Unpinned) {
			t.Fatalf("order-dependent: %v vs %v", p.Evict, q.Evict)
		}
		prot, _ := referenceProtected(HotSetInput{Blocks: in.Blocks, SinkTokens: in.SinkTokens, RecentTokens: in.RecentTokens})
		byID := map[uint64]HotBlock{}
		for _, b := range in.Blocks {
			byID[b.ID] = b
		}
		unpinned := map[uint64]bool{}
		for _, id := range p.Unpinned {
			unpinned[id] = true
		}
		freed, seenPinned := 0, false
		var free []HotBlock
		for i, id := range p.Evict {
			b := byID[id]
			if !b.Hot || b.Sink || b.Recent {
				t.Fatalf("evicted %+v", b)
			}
			if prot[id] != unpinned[id] || (unpinned[id] && !b.Pinned) {
				t.Fatalf("evicted protected %+v (unpinned %v)", b, unpinned[id])
			}
			if unpinned[id] {
				seenPinned = true
			} else if seenPinned {
				t.Fatalf("unprotected block %d after a pinned one", id)
			} else {
				free = append(free, b)
			}
			if freed >= in.NeedTokens {
				t.Fatalf("victim %d of %v after enough was freed", i, p.Evict)
			}
			freed += b.Tokens
		}
		if freed != p.FreedTokens {
			t.Fatalf("freed %d, plan says %d", freed, p.FreedTokens)
		}
		if got := EvictionOrder(free); !slices.Equal(got, p.Evict[:len(free)]) {
			t.Fatalf("victims %v not in EvictionOrder %v", p.Evict[:len(free)], got)
		}
		if freed < in.NeedTokens {
			for _, b := range in.Blocks { // every unprotected hot block went
				if b.Hot && !prot[b.ID] && !slices.Contains(p.Evict, b.ID) {
					t.Fatalf("short of %d but block %d stayed", in.NeedTokens, b.ID)
				}
			}
		}
	}
}

func TestSpillVictim(t *testing.T) {
	if _, ok := SpillVictim(nil); ok {
		t.Fatal("victim among none")
	}
	if _, ok := SpillVictim([]HotBlock{blk(1, 1, 64, 0).hot()}); ok {
		t.Fatal("a hot block spilled")
	}
	// Flags do not protect a parked block: the pinned low scorer goes first.
	bs := []HotBlock{blk(1, 1, 64, 2), blk(2, 2, 64, 1).pinned().class(ClassVolatile), blk(3, 3, 64, 0).hot(), blk(4, 4, 64, 5).class(ClassTaskPinned)}
	if id, ok := SpillVictim(bs); !ok || id != 2 {
		t.Fatalf("victim %d %v, want 2", id, ok)
	}
}

func TestPlanHotSetUnpinning(t *testing.T) {
	in := HotSetInput{Blocks: base(blk(5, 5, 64, 1).pinned().hot(), blk(6, 6, 64, 1).pinned(), blk(7, 7, 64, 3)), HotBudget: 120, SuffixTokens: 8}
	if _, err := PlanHotSet(in); err == nil {
		t.Fatal("pins fit; the test needs them not to")
	}
	p, err := PlanHotSetUnpinning(in)
	if err != nil || p.Unpinned == nil || p.Unpinned.PinnedTokens != 228 || p.PinnedTokens != 0 {
		t.Fatalf("plan %+v, err %v", p, err)
	}
	in.HotBudget = 4096
	p, err = PlanHotSetUnpinning(in)
	if q, _ := PlanHotSet(in); err != nil || p.Unpinned != nil || !slices.Equal(layoutIDs(p), layoutIDs(q)) {
		t.Fatalf("fitting pins: %+v, %v", p, err)
	}
	in.HotBudget, in.SuffixTokens = 10, 20 // the suffix alone does not fit
	if _, err := PlanHotSetUnpinning(in); err == nil {
		t.Fatal("no error for a suffix over the budget")
	}
}
