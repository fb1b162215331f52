package policy

import (
	"errors"
	"reflect"
	"testing"
)

func TestMatchSegments(t *testing.T) {
	// held: [A=1 2][B=3 4 5][C=6 7]; prompt: [A'=9 2][X=8][B=3 4 5][C=6 7]
	held := []int32{1, 2, 3, 4, 5, 6, 7}
	hs := []SpanRange{{0, 2}, {2, 5}, {5, 7}}
	prompt := []int32{9, 2, 8, 3, 4, 5, 6, 7}
	ps := []SpanRange{{0, 2}, {2, 3}, {3, 6}, {6, 8}}
	got := MatchSegments(held, hs, prompt, ps, 0)
	// A' shares A's last token, no more than its edit: no tail. B and C
	// are contiguous on both sides: one run.
	want := []ReuseRun{{Src: 2, Dst: 3, Len: 5}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("runs %+v, want %+v", got, want)
	}
	// Order is kept: a prompt that swaps B and C reuses only one of them.
	prompt2 := []int32{9, 2, 6, 7, 3, 4, 5}
	ps2 := []SpanRange{{0, 2}, {2, 4}, {4, 7}}
	got = MatchSegments(held, hs, prompt2, ps2, 0)
	if len(got) != 1 || got[0] != (ReuseRun{Src: 5, Dst: 2, Len: 2}) {
		t.Fatalf("swapped: runs %+v", got)
	}
	// Held segments before from are never taken (their KV is kept).
	got = MatchSegments(held, hs, prompt, ps, 5)
	if len(got) != 1 || got[0] != (ReuseRun{Src: 5, Dst: 6, Len: 2}) {
		t.Fatalf("from 5: runs %+v", got)
	}
	// An edit inside a long segment: the tail after it is one run, the
	// later segments follow it, the edit itself is left to prefill.
	held3 := []int32{1, 2, 3, 4, 5, 6, 7, 8, 20, 21}
	hs3 := []SpanRange{{0, 8}, {8, 10}}
	prompt3 := []int32{1, 2, 30, 31, 32, 4, 5, 6, 7, 8, 20, 21} // 3 became 30 31 32
	ps3 := []SpanRange{{0, 10}, {10, 12}}
	if got := MatchSegments(held3, hs3, prompt3, ps3, 2); !reflect.DeepEqual(got, []ReuseRun{{Src: 3, Dst: 5, Len: 7}}) {
		t.Fatalf("edited segment: runs %+v", got)
	}
	// A tail no longer than the edit is no tail (two messages sharing an
	// end marker).
	if got := MatchSegments([]int32{1, 2, 3, 4, 99}, []SpanRange{{0, 5}}, []int32{1, 5, 6, 7, 99}, []SpanRange{{0, 5}}, 1); len(got) != 0 {
		t.Fatalf("shared end marker: runs %+v", got)
	}
	// The tail never reaches back past the change (a deletion at its end).
	if got := MatchSegments([]int32{1, 2, 3, 2, 3}, []SpanRange{{0, 5}}, []int32{1, 2, 3}, []SpanRange{{0, 3}}, 3); len(got) != 0 {
		t.Fatalf("deleted end: runs %+v", got)
	}
	// A segment inserted before held ones is not an edit of them, though
	// both end with the same marker (99): the held segments match whole.
	held4 := []int32{1, 5, 6, 99, 7, 8, 99}
	hs4 := []SpanRange{{0, 1}, {1, 4}, {4, 7}}
	prompt4 := []int32{1, 2, 3, 99, 5, 6, 99, 7, 8, 99}
	ps4 := []SpanRange{{0, 1}, {1, 4}, {4, 7}, {7, 10}}
	if got := MatchSegments(held4, hs4, prompt4, ps4, 1); !reflect.DeepEqual(got, []ReuseRun{{Src: 1, Dst: 4, Len: 6}}) {
		t.Fatalf("inserted segment: runs %+v", got)
	}
	// Equal hashes with different tokens never match.
	if got := MatchSegments([]int32{1, 2}, []SpanRange{{0, 2}}, []int32{2, 1}, []SpanRange{{0, 2}}, 0); len(got) != 0 {
		t.Fatalf("different tokens matched: %+v", got)
	}
}

func TestPlanSegmentReuse(t *testing.T) {
	cost := PrefillCost{BaseSeconds: 0.01} // 100 tokens/s
	runs := []ReuseRun{{Src: 10, Dst: 20, Len: 100}, {Src: 110, Dst: 130, Len: 10}, {Src: 200, Dst: 150, Len: 50}}
	base := SegmentReuseInput{Kept: 10, PromptTokens: 200, Runs: runs, Cost: cost}
	// matched 160, new 30 (0.3 s)
	tests := []struct {
		name      string
		mut       func(*SegmentReuseInput)
		wantRuns  []ReuseRun
		approx    int
		recompute int
		budget    int
	}{
		{name: "exact mode", mut: func(in *SegmentReuseInput) { in.Mode = ReuseExact; in.LatencySeconds = 0.4 }, recompute: 160},
		{name: "no latency target", mut: func(in *SegmentReuseInput) {}, recompute: 160},
		{name: "budget covers all", mut: func(in *SegmentReuseInput) { in.LatencySeconds = 100 }, recompute: 160, budget: 160},
		{name: "no slack: pure move", mut: func(in *SegmentReuseInput) { in.LatencySeconds = 0.2 },
			wantRuns: runs, approx: 160},
		{name: "30 tokens of budget in equal heads", mut: func(in *SegmentReuseInput) { in.LatencySeconds = 0.6 },
			// shares of 10: the 10-token run is recomputed whole
			wantRuns: []ReuseRun{{Src: 20, Dst: 30, Len: 90}, {Src: 210, Dst: 160, Len: 40}},
			approx:   130, recompute: 30, budget: 30},
		{name: "short run's share goes to the others", mut: func(in *SegmentReuseInput) { in.LatencySeconds = 0.9 },
			// budget 60: shares 20 each, run 2 takes 10, the 10 left → 5 each
			wantRuns: []ReuseRun{{Src: 35, Dst: 45, Len: 75}, {Src: 225, Dst: 175, Len: 25}},
			approx:   100, recompute: 60, budget: 60},
		{name: "logits: a run ending the prompt gives up its last token", mut: func(in *SegmentReuseInput) {
			in.LatencySeconds, in.NeedLogits = 0.2, true
		}, wantRuns: []ReuseRun{runs[0], runs[1], {Src: 200, Dst: 150, Len: 49}}, approx: 159, recompute: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := base
			tc.mut(&in)
			p, err := PlanSegmentReuse(in)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.wantRuns
			if !reflect.DeepEqual(p.Runs, want) {
				t.Fatalf("runs %+v, want %+v (%s)", p.Runs, want, p.Choice)
			}
			if p.Approximate != tc.approx || p.Recomputed != tc.recompute || p.BudgetTokens != tc.budget || p.New != 30 {
				t.Fatalf("approx %d recompute %d budget %d new %d, want %d %d %d 30 (%s)", p.Approximate, p.Recomputed, p.BudgetTokens, p.New, tc.approx, tc.recompute, tc.budget, p.Choice)
			}
			// The bound the issue asks for: prefilled ≤ new + budget (+1 for logits).
			prefilled := in.PromptTokens - in.Kept - p.Approximate
			extra := 0
			if in.NeedLogits {
				extra = 1
			}
			if in.Mode != ReuseExact && len(p.Runs) > 0 && prefilled > p.New+p.BudgetTokens+extra {
				t.Fatalf("prefilled %d > new %d + budget %d", prefilled, p.New, p.BudgetTokens)
			}
		})
	}
}

func TestPlanSegmentReuseRejects(t *testing.T) {
	bad := []SegmentReuseInput{
		{Kept: 5, PromptTokens: 4},
		{Kept: 0, PromptTokens: 10, Runs: []ReuseRun{{Src: 0, Dst: 5, Len: 6}}},                           // past the prompt
		{Kept: 0, PromptTokens: 10, Runs: []ReuseRun{{Src: 4, Dst: 0, Len: 2}, {Src: 8, Dst: 1, Len: 1}}}, // overlapping destinations
		{Kept: 2, PromptTokens: 10, Runs: []ReuseRun{{Src: 4, Dst: 1, Len: 2}}},                           // before kept
		{Kept: 0, PromptTokens: 10, Cost: PrefillCost{BaseSeconds: -1}},
	}
	for i, in := range bad {
		if _, err := PlanSegmentReuse(in); !errors.Is(err, ErrInvalidReuse) {
			t.Errorf("case %d: err %v, want ErrInvalidReuse", i, err)
		}
	}
}

func TestParseReuseMode(t *testing.T) {
	for _, s := range []string{"auto", "exact"} {
		m, err := ParseReuseMode(s)
		if err != nil || m.String() != s {
			t.Fatalf("%q: %v %v", s, m, err)
		}
	}
	if _, err := ParseReuseMode("fast"); !errors.Is(err, ErrUnknownName) {
		t.Fatalf("fast: %v", err)
	}
}
