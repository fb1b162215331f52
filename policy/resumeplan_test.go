package policy

import (
	"math/rand"
	"testing"
)

// PlanResume brings back a snapshot's unchanged segments past the first
// change only when segment reuse would move them, under the same budget
// as a live session's turn, and never in exact mode.
func TestPlanResume(t *testing.T) {
	fast := &ResumeReuse{Mode: ReuseAuto, Cost: PrefillCost{BaseSeconds: 1e-3}, LatencySeconds: 1e-9} // no recompute budget
	runs := []ReuseRun{{Src: 150, Dst: 200, Len: 600}}
	for _, tc := range []struct {
		name string
		in   ResumeInput
		want ResumePlan
	}{
		{"no reuse: ChooseResume's", ResumeInput{TargetTokens: 1000, MinTokens: 64, Snapshots: []ResumeCandidate{{100, 1}}, SnapshotRuns: [][]ReuseRun{runs}},
			ResumePlan{ResumeChoice: ResumeChoice{ResumeSnapshot, 0, 100}, Upto: 100}},
		{"exact mode", ResumeInput{TargetTokens: 1000, MinTokens: 64, Snapshots: []ResumeCandidate{{100, 1}}, SnapshotRuns: [][]ReuseRun{runs},
			Reuse: &ResumeReuse{Mode: ReuseExact, Cost: fast.Cost, LatencySeconds: fast.LatencySeconds}},
			ResumePlan{ResumeChoice: ResumeChoice{ResumeSnapshot, 0, 100}, Upto: 100}},
		{"segments past the change come back", ResumeInput{TargetTokens: 1000, MinTokens: 64, Snapshots: []ResumeCandidate{{100, 1}}, SnapshotRuns: [][]ReuseRun{runs}, Reuse: fast},
			ResumePlan{ResumeChoice: ResumeChoice{ResumeSnapshot, 0, 100}, Upto: 750, Approximate: 600}},
		{"a short common prefix is enough with segments", ResumeInput{TargetTokens: 1000, MinTokens: 64, Snapshots: []ResumeCandidate{{10, 1}}, SnapshotRuns: [][]ReuseRun{{{Src: 10, Dst: 20, Len: 500}}}, Reuse: fast},
			ResumePlan{ResumeChoice: ResumeChoice{ResumeSnapshot, 0, 10}, Upto: 510, Approximate: 500}},
		{"prefilling fits the target: nothing moved", ResumeInput{TargetTokens: 1000, MinTokens: 64, Snapshots: []ResumeCandidate{{100, 1}}, SnapshotRuns: [][]ReuseRun{runs},
			Reuse: &ResumeReuse{Mode: ReuseAuto, Cost: PrefillCost{BaseSeconds: 1e-3}, LatencySeconds: 10}},
			ResumePlan{ResumeChoice: ResumeChoice{ResumeSnapshot, 0, 100}, Upto: 100}},
		{"more prefix and segments beats more prefix alone", ResumeInput{TargetTokens: 1000, MinTokens: 64, Snapshots: []ResumeCandidate{{300, 9}, {100, 1}},
			SnapshotRuns: [][]ReuseRun{nil, runs}, Reuse: fast},
			ResumePlan{ResumeChoice: ResumeChoice{ResumeSnapshot, 1, 100}, Upto: 750, Approximate: 600}},
		{"an orphan tape sharing more wins", ResumeInput{TargetTokens: 1000, MinTokens: 64, Arena: []int{800}, Snapshots: []ResumeCandidate{{100, 1}}, SnapshotRuns: [][]ReuseRun{runs}, Reuse: fast},
			ResumePlan{ResumeChoice: ResumeChoice{ResumeArena, 0, 800}, Upto: 800}},
		{"an orphan tape's segments past the change come back", ResumeInput{TargetTokens: 1000, MinTokens: 64, Arena: []int{100}, ArenaRuns: [][]ReuseRun{runs}, Reuse: fast},
			ResumePlan{ResumeChoice: ResumeChoice{ResumeArena, 0, 100}, Upto: 750, Approximate: 600}},
		{"an orphan tape worth as much as a snapshot wins (no SSD read)", ResumeInput{TargetTokens: 1000, MinTokens: 64, Arena: []int{100}, ArenaRuns: [][]ReuseRun{runs},
			Snapshots: []ResumeCandidate{{100, 1}}, SnapshotRuns: [][]ReuseRun{runs}, Reuse: fast},
			ResumePlan{ResumeChoice: ResumeChoice{ResumeArena, 0, 100}, Upto: 750, Approximate: 600}},
		{"a snapshot with segments beats an orphan tape's prefix alone", ResumeInput{TargetTokens: 1000, MinTokens: 64, Arena: []int{300}, ArenaRuns: [][]ReuseRun{nil},
			Snapshots: []ResumeCandidate{{100, 1}}, SnapshotRuns: [][]ReuseRun{runs}, Reuse: fast},
			ResumePlan{ResumeChoice: ResumeChoice{ResumeSnapshot, 0, 100}, Upto: 750, Approximate: 600}},
		{"an orphan tape sharing a short prefix is left to lend as a donor", ResumeInput{TargetTokens: 1000, MinTokens: 64, Arena: []int{10}, ArenaRuns: [][]ReuseRun{{{Src: 10, Dst: 20, Len: 500}}}, Reuse: fast},
			ResumePlan{ResumeChoice: ResumeChoice{ResumeNone, 0, 0}}},
		{"orphan segments in exact mode: the prefix only", ResumeInput{TargetTokens: 1000, MinTokens: 64, Arena: []int{100}, ArenaRuns: [][]ReuseRun{runs},
			Reuse: &ResumeReuse{Mode: ReuseExact, Cost: fast.Cost, LatencySeconds: fast.LatencySeconds}},
			ResumePlan{ResumeChoice: ResumeChoice{ResumeArena, 0, 100}, Upto: 100}},
		{"invalid runs are ignored", ResumeInput{TargetTokens: 1000, MinTokens: 64, Snapshots: []ResumeCandidate{{100, 1}}, SnapshotRuns: [][]ReuseRun{{{Src: 150, Dst: 995, Len: 10}}}, Reuse: fast},
			ResumePlan{ResumeChoice: ResumeChoice{ResumeSnapshot, 0, 100}, Upto: 100}},
		{"a run whose source lies in the kept prefix restores no more than the prefix", ResumeInput{TargetTokens: 1000, MinTokens: 64, Snapshots: []ResumeCandidate{{100, 1}}, SnapshotRuns: [][]ReuseRun{{{Src: 50, Dst: 200, Len: 10}}}, Reuse: fast},
			ResumePlan{ResumeChoice: ResumeChoice{ResumeSnapshot, 0, 100}, Upto: 100, Approximate: 10}},
		{"sources out of order restore up to the furthest", ResumeInput{TargetTokens: 1000, MinTokens: 64, Snapshots: []ResumeCandidate{{100, 1}}, SnapshotRuns: [][]ReuseRun{{{Src: 400, Dst: 200, Len: 100}, {Src: 150, Dst: 300, Len: 50}}}, Reuse: fast},
			ResumePlan{ResumeChoice: ResumeChoice{ResumeSnapshot, 0, 100}, Upto: 500, Approximate: 150}},
	} {
		got := PlanResume(tc.in)
		got.Choice = ""
		if got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
	// Part of the budget: the heads of the runs are recomputed.
	in := ResumeInput{TargetTokens: 1000, MinTokens: 64, Snapshots: []ResumeCandidate{{100, 1}}, SnapshotRuns: [][]ReuseRun{runs},
		Reuse: &ResumeReuse{Mode: ReuseAuto, Cost: PrefillCost{BaseSeconds: 1e-3}, LatencySeconds: 1e-3 * (300 + 50.5)}}
	if p := PlanResume(in); p.Approximate != 550 || p.Recomputed != 50 || p.Upto != 750 || p.Choice == "" {
		t.Fatalf("a budget of 50 tokens: %+v", p)
	}
}

// A plan never keeps more exact tokens than the target shares with its
// source, never moves more than was matched, and prefills at most the new
// tokens plus the recompute budget.
func TestPlanResumeProperties(t *testing.T) {
	r := rand.New(rand.NewSource(20))
	for range 3000 {
		target := 64 + r.Intn(2000)
		in := ResumeInput{TargetTokens: target, MinTokens: 64,
			Reuse: &ResumeReuse{Mode: ReuseAuto, Cost: PrefillCost{BaseSeconds: 1e-3}, LatencySeconds: 1e-3 * float64(r.Intn(3000))}}
		randomRuns := func(common int) []ReuseRun {
			var runs []ReuseRun
			src, dst := common+r.Intn(50), common+r.Intn(50)
			for dst < target && r.Intn(4) > 0 {
				n := 1 + r.Intn(300)
				if dst+n > target {
					break
				}
				runs = append(runs, ReuseRun{Src: src, Dst: dst, Len: n})
				src, dst = src+n+r.Intn(40), dst+n+r.Intn(40)
			}
			return runs
		}
		for range r.Intn(3) {
			common := r.Intn(target + 1)
			in.Arena = append(in.Arena, common)
			if r.Intn(2) == 0 {
				in.ArenaRuns = append(in.ArenaRuns, randomRuns(common))
			} else {
				in.ArenaRuns = append(in.ArenaRuns, nil)
			}
		}
		for range 1 + r.Intn(3) {
			common := r.Intn(target + 1)
			in.Snapshots = append(in.Snapshots, ResumeCandidate{common, int64(r.Intn(3))})
			in.SnapshotRuns = append(in.SnapshotRuns, randomRuns(common))
		}
		p := PlanResume(in)
		if p.Source == ResumeNone {
			continue
		}
		if p.Upto < p.Tokens || p.Tokens > target {
			t.Fatalf("%+v: %+v", in, p)
		}
		common, runs := 0, []ReuseRun(nil)
		if p.Source == ResumeArena {
			common, runs = in.Arena[p.Index], in.ArenaRuns[p.Index]
			if common < in.MinTokens {
				t.Fatalf("%+v: adopted an orphan sharing %d tokens: %+v", in, common, p)
			}
		} else {
			common, runs = in.Snapshots[p.Index].CommonTokens, in.SnapshotRuns[p.Index]
		}
		if p.Approximate == 0 {
			if p.Upto != p.Tokens || p.Tokens != min(common, target) {
				t.Fatalf("%+v: %+v", in, p)
			}
			continue
		}
		matched := 0
		for _, run := range runs {
			matched += run.Len
		}
		newTokens := target - p.Tokens - matched
		budget := int(in.Reuse.LatencySeconds/1e-3+1e-9) - newTokens
		if p.Approximate > matched || p.Approximate+p.Recomputed != matched || p.Recomputed > max(budget, 0) {
			t.Fatalf("%+v: %+v (matched %d, new %d, budget %d)", in, p, matched, newTokens, budget)
		}
	}
}
