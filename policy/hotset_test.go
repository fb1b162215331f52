package policy

import (
	"errors"
	"math"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// blk builds a parked, unprotected volatile block.
func blk(id uint64, seq, tokens int, score float64) HotBlock {
	return HotBlock{ID: id, Seq: seq, Tokens: tokens, Score: score, Kind: KindTerminal}
}

func (b HotBlock) hot() HotBlock               { b.Hot = true; return b }
func (b HotBlock) pinned() HotBlock            { b.Pinned = true; b.Kind = KindPinned; return b }
func (b HotBlock) sink() HotBlock              { b.Sink = true; b.Kind = KindSystem; return b }
func (b HotBlock) recent() HotBlock            { b.Recent = true; return b }
func (b HotBlock) class(c CacheClass) HotBlock { b.Class = c; return b }
func (b HotBlock) used(t int64) HotBlock       { b.LastUsed = t; return b }
func (b HotBlock) kind(k SegmentKind) HotBlock { b.Kind = k; return b }
func layoutIDs(p HotSetPlan) (ids []uint64)    { return entryIDs(p.Layout) }
func entryIDs(es []LayoutEntry) (ids []uint64) {
	for _, e := range es {
		ids = append(ids, e.ID)
	}
	return ids
}

// base is a session with a 4-token sink (id 1), 100 pinned tokens (id 2)
// and a 50-token recent window (id 9), plus the blocks given.
func base(extra ...HotBlock) []HotBlock {
	return append([]HotBlock{
		blk(1, 0, 4, 0).sink().hot(),
		blk(2, 1, 100, 0).pinned().hot(),
		blk(9, 100, 50, 0).recent().hot(),
	}, extra...)
}

func TestPlanHotSet(t *testing.T) {
	tests := []struct {
		name                string
		in                  HotSetInput
		layout, admit, keep []uint64
		evict               []uint64
		free                int
	}{
		{
			name: "budget exactly fits",
			in: HotSetInput{Blocks: base(blk(3, 2, 30, 5), blk(4, 3, 20, 3).hot()),
				HotBudget: 4 + 100 + 50 + 30 + 20 + 10, SuffixTokens: 10},
			layout: []uint64{1, 2, 3, 4, 9}, admit: []uint64{3}, keep: []uint64{1, 2, 4, 9}, free: 0,
		},
		{
			name: "high score admitted over low-score hot block",
			in: HotSetInput{Blocks: base(blk(3, 2, 30, 1).hot(), blk(4, 3, 30, 7)),
				HotBudget: 154 + 30 + 10, SuffixTokens: 10},
			layout: []uint64{1, 2, 4, 9}, admit: []uint64{4}, keep: []uint64{1, 2, 9}, evict: []uint64{3},
		},
		{
			name: "volatile evicted before repo_map before task_pinned",
			in: HotSetInput{Blocks: base(
				blk(5, 5, 10, 9).hot().class(ClassTaskPinned),
				blk(3, 3, 10, 1).hot().kind(KindRepoMap), // repo_map by default class
				blk(4, 4, 10, 8).hot(),                   // volatile, high score
				blk(6, 6, 10, 0).hot().kind(KindSystem),  // task_pinned by default class
			), HotBudget: 154},
			layout: []uint64{1, 2, 9}, keep: []uint64{1, 2, 9}, evict: []uint64{4, 3, 6, 5},
		},
		{
			name: "block that does not fit is skipped, smaller later ones fit",
			in: HotSetInput{Blocks: base(blk(3, 3, 60, 9), blk(4, 4, 40, 5), blk(5, 5, 10, 1)),
				HotBudget: 154 + 50},
			layout: []uint64{1, 2, 4, 5, 9}, admit: []uint64{4, 5}, keep: []uint64{1, 2, 9}, free: 0,
		},
		{
			name: "MaxRetrieved caps retrieved blocks",
			in: HotSetInput{Blocks: base(blk(3, 3, 5, 1), blk(4, 4, 5, 3), blk(5, 5, 5, 2)),
				HotBudget: 1000, MaxRetrieved: 2},
			layout: []uint64{1, 2, 4, 5, 9}, admit: []uint64{4, 5}, keep: []uint64{1, 2, 9}, free: 1000 - 164,
		},
		{
			name: "MinScore keeps low scores out, even hot ones",
			in: HotSetInput{Blocks: base(blk(3, 3, 5, 0.5).hot(), blk(4, 4, 5, 3), blk(5, 5, 5, -1)),
				HotBudget: 1000, MinScore: 1},
			layout: []uint64{1, 2, 4, 9}, admit: []uint64{4}, keep: []uint64{1, 2, 9}, evict: []uint64{3}, free: 1000 - 159,
		},
		{
			name: "trained window bounds the budget",
			in: HotSetInput{Blocks: base(blk(3, 3, 40, 2), blk(4, 4, 40, 1)),
				HotBudget: 1000, TrainedWindow: 200, SuffixTokens: 6},
			layout: []uint64{1, 2, 3, 9}, admit: []uint64{3}, keep: []uint64{1, 2, 9}, free: 0,
		},
		{
			name: "score ties: more recent first, then lower seq",
			in: HotSetInput{Blocks: base(blk(3, 3, 10, 2).used(1), blk(4, 4, 10, 2).used(5), blk(5, 5, 10, 2).used(5), blk(6, 6, 10, 2).used(5)),
				HotBudget: 154 + 20},
			layout: []uint64{1, 2, 4, 5, 9}, admit: []uint64{4, 5}, keep: []uint64{1, 2, 9},
		},
		{
			name: "sink and recent marked by token counts",
			in: HotSetInput{Blocks: []HotBlock{blk(1, 0, 3, 0), blk(2, 1, 3, 0), blk(3, 2, 3, 0), blk(4, 3, 3, 0), blk(5, 4, 3, 0)},
				HotBudget: 12, SinkTokens: 4, RecentTokens: 1, MinScore: 1},
			layout: []uint64{1, 2, 5}, admit: []uint64{1, 2, 5}, free: 3,
		},
		{
			name:   "empty session",
			in:     HotSetInput{HotBudget: 10, SuffixTokens: 10},
			layout: nil, free: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanHotSet(tc.in)
			if err != nil {
				t.Fatalf("PlanHotSet: %v", err)
			}
			check := func(what string, got, want []uint64) {
				if !slices.Equal(got, want) {
					t.Errorf("%s = %v, want %v", what, got, want)
				}
			}
			check("layout", layoutIDs(p), tc.layout)
			check("admit", p.Admit, tc.admit)
			check("keep", p.Keep, tc.keep)
			check("evict", p.Evict, tc.evict)
			if p.FreeTokens != tc.free {
				t.Errorf("FreeTokens = %d, want %d", p.FreeTokens, tc.free)
			}
			checkPlanShape(t, tc.in, p)
		})
	}
}

// checkPlanShape checks the layout is contiguous from 0, grouped by role in
// Seq order, within the limit, and that the counts add up.
func checkPlanShape(t *testing.T, in HotSetInput, p HotSetPlan) {
	t.Helper()
	limit := in.HotBudget
	if in.TrainedWindow > 0 {
		limit = min(limit, in.TrainedWindow)
	}
	if p.Limit != limit {
		t.Errorf("Limit = %d, want %d", p.Limit, limit)
	}
	pos := 0
	byRole := map[HotRole]int{}
	for i, e := range p.Layout {
		if e.Start != pos {
			t.Errorf("layout[%d] (id %d) starts at %d, want %d", i, e.ID, e.Start, pos)
		}
		if i > 0 {
			prev := p.Layout[i-1]
			if prev.Role > e.Role || prev.Role == e.Role && prev.Seq >= e.Seq {
				t.Errorf("layout[%d] (%s, seq %d) after (%s, seq %d)", i, e.Role, e.Seq, prev.Role, prev.Seq)
			}
		}
		if in.TrainedWindow > 0 && e.Start+e.Tokens > in.TrainedWindow {
			t.Errorf("layout[%d] ends at %d, past trained window %d", i, e.Start+e.Tokens, in.TrainedWindow)
		}
		if e.Reason == "" {
			t.Errorf("layout[%d] has no reason", i)
		}
		pos += e.Tokens
		byRole[e.Role] += e.Tokens
	}
	if p.SuffixStart != pos {
		t.Errorf("SuffixStart = %d, want %d", p.SuffixStart, pos)
	}
	if p.SuffixStart+in.SuffixTokens > limit || p.FreeTokens != limit-p.SuffixStart-in.SuffixTokens {
		t.Errorf("suffix [%d, +%d) with free %d over limit %d", p.SuffixStart, in.SuffixTokens, p.FreeTokens, limit)
	}
	if p.SinkTokens != byRole[RoleSink] || p.PinnedTokens != byRole[RolePinned] || p.RecentTokens != byRole[RoleRecent] ||
		p.RetrievedTokens != byRole[RoleRetrieved] || p.ProtectedTokens != p.SinkTokens+p.PinnedTokens+p.RecentTokens {
		t.Errorf("token counts %+v do not match layout %v", p, byRole)
	}
}

func TestPlanHotSetReasons(t *testing.T) {
	in := HotSetInput{Blocks: base(blk(3, 3, 60, 9), blk(4, 4, 40, 3.2149), blk(5, 5, 10, 1)), HotBudget: 154 + 50}
	p, err := PlanHotSet(in)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]string{1: "attention sink", 2: "pinned", 4: "score 3.21, rank 2 of 3", 5: "score 1, rank 3 of 3", 9: "recent window"}
	for _, e := range p.Layout {
		if e.Reason != want[e.ID] {
			t.Errorf("id %d reason %q, want %q", e.ID, e.Reason, want[e.ID])
		}
	}
	if p.ProtectedTokens != 154 || p.RetrievedTokens != 50 || p.AdmittedTokens != 50 || p.EvictedTokens != 0 {
		t.Errorf("counts: protected %d retrieved %d admitted %d evicted %d", p.ProtectedTokens, p.RetrievedTokens, p.AdmittedTokens, p.EvictedTokens)
	}
}

func TestPlanHotSetLayoutOrder(t *testing.T) {
	// Original order: sink, retrieved r1, pinned, retrieved r2, pinned,
	// recent. Layout: sink, pinned×2, r1, r2, recent.
	in := HotSetInput{Blocks: []HotBlock{
		blk(60, 60, 8, 0).recent(),
		blk(30, 30, 8, 2),
		blk(20, 20, 8, 0).pinned(),
		blk(0, 0, 4, 0).sink(),
		blk(40, 40, 8, 0).pinned().hot(),
		blk(10, 10, 8, 1).hot(),
		blk(50, 50, 8, -1).hot(),
	}, HotBudget: 100, SuffixTokens: 16}
	p, err := PlanHotSet(in)
	if err != nil {
		t.Fatal(err)
	}
	want := []LayoutEntry{
		{ID: 0, Start: 0, Tokens: 4, Seq: 0, Role: RoleSink, Reason: "attention sink"},
		{ID: 20, Start: 4, Tokens: 8, Seq: 20, Role: RolePinned, Reason: "pinned"},
		{ID: 40, Start: 12, Tokens: 8, Seq: 40, Role: RolePinned, Reason: "pinned"},
		{ID: 10, Start: 20, Tokens: 8, Seq: 10, Role: RoleRetrieved, Reason: "score 1, rank 2 of 2"},
		{ID: 30, Start: 28, Tokens: 8, Seq: 30, Role: RoleRetrieved, Reason: "score 2, rank 1 of 2"},
		{ID: 60, Start: 36, Tokens: 8, Seq: 60, Role: RoleRecent, Reason: "recent window"},
	}
	if !reflect.DeepEqual(p.Layout, want) {
		t.Errorf("layout\n got %+v\nwant %+v", p.Layout, want)
	}
	if p.SuffixStart != 44 || !slices.Equal(p.Evict, []uint64{50}) {
		t.Errorf("SuffixStart %d, Evict %v", p.SuffixStart, p.Evict)
	}
}

func TestPlanHotSetBudgetError(t *testing.T) {
	tests := []struct {
		name string
		in   HotSetInput
		msg  string
	}{
		{"protected over budget", HotSetInput{Blocks: base(blk(3, 3, 10, 9)), HotBudget: 160, SuffixTokens: 10},
			"sinks 4 + pinned 100 + recent 50 + suffix 10 = 164 tokens exceed the limit of 160 (hot budget 160, trained window 0)"},
		{"trained window below protected", HotSetInput{Blocks: base(), HotBudget: 4096, TrainedWindow: 128},
			"sinks 4 + pinned 100 + recent 50 + suffix 0 = 154 tokens exceed the limit of 128 (hot budget 4096, trained window 128)"},
		{"suffix alone over budget", HotSetInput{HotBudget: 10, SuffixTokens: 11},
			"suffix 11 = 11 tokens exceed the limit of 10"},
		{"huge suffix does not overflow", HotSetInput{Blocks: base(), HotBudget: math.MaxInt, SuffixTokens: math.MaxInt},
			"exceed the limit of"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanHotSet(tc.in)
			if !errors.Is(err, ErrHotBudget) || errors.Is(err, ErrInvalidHotSet) {
				t.Fatalf("err = %v, want ErrHotBudget", err)
			}
			var be *HotBudgetError
			if !errors.As(err, &be) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %q, want a *HotBudgetError containing %q", err, tc.msg)
			}
			if !reflect.DeepEqual(p, HotSetPlan{}) {
				t.Errorf("plan not zero on error: %+v", p)
			}
		})
	}
}

func TestPlanHotSetInvalid(t *testing.T) {
	ok := HotSetInput{Blocks: base(), HotBudget: 1000}
	with := func(f func(*HotSetInput)) HotSetInput {
		in := ok
		in.Blocks = slices.Clone(ok.Blocks)
		f(&in)
		return in
	}
	tests := map[string]HotSetInput{
		"negative budget":        with(func(in *HotSetInput) { in.HotBudget = -1 }),
		"negative sink tokens":   with(func(in *HotSetInput) { in.SinkTokens = -1 }),
		"negative recent tokens": with(func(in *HotSetInput) { in.RecentTokens = -1 }),
		"negative suffix":        with(func(in *HotSetInput) { in.SuffixTokens = -1 }),
		"negative window":        with(func(in *HotSetInput) { in.TrainedWindow = -1 }),
		"negative max retrieved": with(func(in *HotSetInput) { in.MaxRetrieved = -1 }),
		"NaN min score":          with(func(in *HotSetInput) { in.MinScore = math.NaN() }),
		"zero-length block":      with(func(in *HotSetInput) { in.Blocks[0].Tokens = 0 }),
		"unknown class":          with(func(in *HotSetInput) { in.Blocks[0].Class = 7 }),
		"no effective class":     with(func(in *HotSetInput) { in.Blocks[0].Kind = KindUnspecified }),
		"NaN score":              with(func(in *HotSetInput) { in.Blocks[0].Score = math.NaN() }),
		"duplicate id":           with(func(in *HotSetInput) { in.Blocks[1].ID = in.Blocks[0].ID }),
		"duplicate seq":          with(func(in *HotSetInput) { in.Blocks[1].Seq = in.Blocks[0].Seq }),
		"token overflow": with(func(in *HotSetInput) {
			in.Blocks[0].Tokens, in.Blocks[1].Tokens = math.MaxInt, math.MaxInt
		}),
	}
	for name, in := range tests {
		if _, err := PlanHotSet(in); !errors.Is(err, ErrInvalidHotSet) {
			t.Errorf("%s: err = %v, want ErrInvalidHotSet", name, err)
		}
	}
	if _, err := PlanHotSet(ok); err != nil {
		t.Errorf("valid input: %v", err)
	}
	// A block of unspecified kind is fine when its class is set.
	if _, err := PlanHotSet(with(func(in *HotSetInput) { in.Blocks[0].Kind, in.Blocks[0].Class = 0, ClassVolatile })); err != nil {
		t.Errorf("class without kind: %v", err)
	}
}

func TestEvictionOrder(t *testing.T) {
	blocks := []HotBlock{
		blk(1, 1, 1, 5).class(ClassTaskPinned),
		blk(2, 2, 1, 5).kind(KindRepoMap),
		blk(3, 3, 1, 9),                // volatile, high score
		blk(4, 4, 1, 1),                // volatile, low score
		blk(5, 5, 1, 1).used(3),        // same score, used later
		blk(6, 0, 1, 1).used(3),        // ties 5 but lower seq
		blk(7, 7, 1, -5).pinned(),      // protected: last despite low score
		blk(8, 8, 1, math.NaN()),       // NaN lowest
		blk(9, 9, 1, 0).kind(KindDiff), // volatile default
		blk(10, 10, 1, 0).recent(),
	}
	// Unprotected volatile by score (NaN, 0, then the three 1s by last use
	// and seq, then 9), repo_map, task_pinned; then the protected ones:
	// 10 (volatile) before 7 (task_pinned).
	want := []uint64{8, 9, 4, 6, 5, 3, 2, 1, 10, 7}
	r := rand.New(rand.NewSource(1))
	for range 20 {
		if got := EvictionOrder(blocks); !slices.Equal(got, want) {
			t.Fatalf("EvictionOrder = %v, want %v", got, want)
		}
		r.Shuffle(len(blocks), func(i, j int) { blocks[i], blocks[j] = blocks[j], blocks[i] })
	}
	if got := EvictionOrder(nil); len(got) != 0 {
		t.Errorf("EvictionOrder(nil) = %v", got)
	}
}

func TestHotRoleString(t *testing.T) {
	for r, want := range map[HotRole]string{RoleSink: "sink", RolePinned: "pinned", RoleRetrieved: "retrieved", RoleRecent: "recent", 0: "HotRole(0)", 5: "HotRole(5)"} {
		if r.String() != want {
			t.Errorf("HotRole(%d).String() = %q, want %q", int(r), r.String(), want)
		}
	}
}
