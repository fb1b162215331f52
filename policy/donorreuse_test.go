package policy

import (
	"reflect"
	"testing"
)

func TestDonorPrefix(t *testing.T) {
	prompt := []int32{1, 5, 6, 7, 8, 9}
	donors := []HeldTape{
		{Tokens: []int32{1, 5, 6, 0}, Exact: 4},       // 3 in common
		{Tokens: []int32{1, 5, 6, 7, 8, 2}, Exact: 4}, // 5 in common, exact only for 4
		{Tokens: []int32{1, 5, 6, 7, 8, 9}, Exact: 0}, // all approximate: none
	}
	if d, end := DonorPrefix(donors, prompt, 0); d != 1 || end != 4 {
		t.Fatalf("donor %d end %d, want donor 1 to 4 (its exact part)", d, end)
	}
	if d, end := DonorPrefix(donors, prompt, 4); d != -1 || end != 4 {
		t.Fatalf("kept 4: donor %d end %d, want none", d, end)
	}
	if d, end := DonorPrefix(nil, prompt, 2); d != -1 || end != 2 {
		t.Fatalf("no donors: %d %d", d, end)
	}
}

func TestMatchDonorSegments(t *testing.T) {
	// prompt: [S'=9 9][T=3 4 5][U=6 7][V=8]; own covers U.
	prompt := []int32{9, 9, 3, 4, 5, 6, 7, 8}
	ps := []SpanRange{{0, 2}, {2, 5}, {5, 7}, {7, 8}}
	own := []ReuseRun{{Src: 4, Dst: 5, Len: 2}}
	donors := []HeldTape{
		{Tokens: []int32{1, 8}, Spans: []SpanRange{{0, 1}, {1, 2}}},
		{Tokens: []int32{1, 2, 3, 4, 5, 8}, Spans: []SpanRange{{0, 2}, {2, 5}, {5, 6}}},
	}
	got := MatchDonorSegments(donors, prompt, ps, 0, own)
	want := []ReuseRun{{Src: 2, Dst: 2, Len: 3, Donor: 2}, {Src: 1, Dst: 7, Len: 1, Donor: 1}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("runs %+v, want %+v", got, want)
	}
	// A segment straddling from is matched whole (MergeRuns cuts it);
	// one ending at from is not. Different tokens with one hash never match.
	if got := MatchDonorSegments(donors, prompt, ps, 3, own); !reflect.DeepEqual(got, want) {
		t.Fatalf("from 3: %+v", got)
	}
	if got := MatchDonorSegments(donors, prompt, ps, 5, own); !reflect.DeepEqual(got, want[1:]) {
		t.Fatalf("from 5: %+v", got)
	}
	if got := MergeRuns(nil, want, 3); got[0] != (ReuseRun{Src: 3, Dst: 3, Len: 2, Donor: 2}) {
		t.Fatalf("cut at 3: %+v", got)
	}
	if got := MatchDonorSegments([]HeldTape{{Tokens: []int32{4, 3}, Spans: []SpanRange{{0, 2}}}}, []int32{3, 4}, []SpanRange{{0, 2}}, 0, nil); len(got) != 0 {
		t.Fatalf("different tokens matched: %+v", got)
	}
	// Two equal prompt segments take two equal donor segments, in order.
	d := []HeldTape{{Tokens: []int32{7, 7, 0, 7, 7}, Spans: []SpanRange{{0, 2}, {2, 3}, {3, 5}}}}
	got = MatchDonorSegments(d, []int32{7, 7, 7, 7}, []SpanRange{{0, 2}, {2, 4}}, 0, nil)
	if !reflect.DeepEqual(got, []ReuseRun{{Src: 0, Dst: 0, Len: 2, Donor: 1}, {Src: 3, Dst: 2, Len: 2, Donor: 1}}) {
		t.Fatalf("repeated segments: %+v", got)
	}
}

// A run goes on with its donor when that donor holds the next segment
// right after it, even if an earlier donor holds it too: one run, not
// two (a hot set copies whole blocks, so each boundary costs some).
func TestMatchDonorSegmentsContinuesARun(t *testing.T) {
	prompt := []int32{1, 2, 3, 4, 5, 6}
	ps := []SpanRange{{0, 2}, {2, 4}, {4, 6}}
	donors := []HeldTape{
		{Tokens: []int32{3, 4}, Spans: []SpanRange{{0, 2}}},                                        // holds the middle segment only
		{Tokens: []int32{9, 1, 2, 3, 4, 5, 6}, Spans: []SpanRange{{0, 1}, {1, 3}, {3, 5}, {5, 7}}}, // holds all three, contiguous
	}
	got := MatchDonorSegments(donors, prompt, ps, 0, nil)
	if want := []ReuseRun{{Src: 1, Dst: 0, Len: 6, Donor: 2}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("runs %+v, want %+v", got, want)
	}
	// Not contiguous in the second donor: the first donor's copy wins.
	donors[1] = HeldTape{Tokens: []int32{1, 2, 0, 3, 4, 5, 6}, Spans: []SpanRange{{0, 2}, {2, 3}, {3, 5}, {5, 7}}}
	got = MatchDonorSegments(donors, prompt, ps, 0, nil)
	if want := []ReuseRun{{Src: 0, Dst: 0, Len: 2, Donor: 2}, {Src: 0, Dst: 2, Len: 2, Donor: 1}, {Src: 5, Dst: 4, Len: 2, Donor: 2}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("runs %+v, want %+v", got, want)
	}
}

func TestMergeRunsAndPlanWithDonors(t *testing.T) {
	own := []ReuseRun{{Src: 50, Dst: 40, Len: 20}}
	donor := []ReuseRun{{Src: 100, Dst: 5, Len: 30, Donor: 1}, {Src: 3, Dst: 60, Len: 30, Donor: 2}}
	got := MergeRuns(own, donor, 10)
	want := []ReuseRun{{Src: 105, Dst: 10, Len: 25, Donor: 1}, {Src: 50, Dst: 40, Len: 20}, {Src: 3, Dst: 60, Len: 30, Donor: 2}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("merged %+v, want %+v", got, want)
	}
	// Donor runs' sources need no order; the plan keeps their donors and
	// prefills at most new + budget.
	in := SegmentReuseInput{Kept: 10, PromptTokens: 100, Runs: got, Cost: PrefillCost{BaseSeconds: 0.01}, LatencySeconds: 0.25 + 0.15}
	p, err := PlanSegmentReuse(in)
	if err != nil {
		t.Fatal(err)
	}
	if p.New != 15 || p.BudgetTokens != 25 || p.Recomputed != 25 || p.Approximate != 50 {
		t.Fatalf("plan %+v", p)
	}
	for i, r := range p.Runs {
		if r.Donor != got[i].Donor {
			t.Fatalf("run %d lost its donor: %+v", i, p.Runs)
		}
	}
	// Sources may come in any order (the KV is copied out first); the
	// destinations may not.
	bad := in
	bad.Runs = []ReuseRun{{Src: 50, Dst: 10, Len: 5}, {Src: 40, Dst: 20, Len: 5, Donor: 1}}
	if _, err := PlanSegmentReuse(bad); err != nil {
		t.Fatalf("sources out of order refused: %v", err)
	}
	bad.Runs = []ReuseRun{{Src: 50, Dst: 20, Len: 5}, {Src: 40, Dst: 10, Len: 5}}
	if _, err := PlanSegmentReuse(bad); err == nil {
		t.Fatal("destinations out of order accepted")
	}
}

func TestPrefixGaps(t *testing.T) {
	runs := []ReuseRun{{Src: 0, Dst: 10, Len: 5, Donor: 2}, {Src: 9, Dst: 20, Len: 10}}
	got := PrefixGaps(runs, 4, 25, 1)
	want := []ReuseRun{{Src: 4, Dst: 4, Len: 6, Donor: 1}, {Src: 15, Dst: 15, Len: 5, Donor: 1}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("gaps %+v, want %+v", got, want)
	}
	if got := PrefixGaps(nil, 4, 9, 3); !reflect.DeepEqual(got, []ReuseRun{{Src: 4, Dst: 4, Len: 5, Donor: 3}}) {
		t.Fatalf("no runs: %+v", got)
	}
}

func TestDonorWorthCopying(t *testing.T) {
	tests := []struct {
		saved       int
		perTok, cpy float64
		want        bool
	}{
		{saved: 0, perTok: 0.01, cpy: 0, want: false},
		{saved: 30, perTok: 0.01, cpy: 1.5, want: false}, // 0.3 s of prefill against 1.5 s of copying
		{saved: 14500, perTok: 0.01, cpy: 1.5, want: true},
		{saved: 30, perTok: 0, cpy: 1.5, want: true},  // no cost model: copy
		{saved: 30, perTok: 0.01, cpy: 0, want: true}, // no copy estimate yet
	}
	for _, tc := range tests {
		if got := DonorWorthCopying(tc.saved, tc.perTok, tc.cpy); got != tc.want {
			t.Errorf("%+v: got %v", tc, got)
		}
	}
}
