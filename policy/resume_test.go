package policy

import (
	"math/rand"
	"testing"
)

func TestChooseResume(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   ResumeInput
		want ResumeChoice
	}{
		{"nothing", ResumeInput{TargetTokens: 500, MinTokens: 64}, ResumeChoice{}},
		{"short target", ResumeInput{TargetTokens: 50, MinTokens: 64, Arena: []int{50}}, ResumeChoice{}},
		{"arena beats an equal snapshot", ResumeInput{TargetTokens: 500, MinTokens: 64, Arena: []int{100, 300}, Snapshots: []ResumeCandidate{{300, 5}}},
			ResumeChoice{ResumeArena, 1, 300}},
		{"longer snapshot wins", ResumeInput{TargetTokens: 500, MinTokens: 64, Arena: []int{100}, Snapshots: []ResumeCandidate{{300, 5}, {200, 9}}},
			ResumeChoice{ResumeSnapshot, 0, 300}},
		{"newest of equal snapshots", ResumeInput{TargetTokens: 500, MinTokens: 64, Snapshots: []ResumeCandidate{{300, 5}, {300, 9}, {300, 9}}},
			ResumeChoice{ResumeSnapshot, 1, 300}},
		{"first of equal tapes", ResumeInput{TargetTokens: 500, MinTokens: 64, Arena: []int{200, 200}}, ResumeChoice{ResumeArena, 0, 200}},
		{"too little in common", ResumeInput{TargetTokens: 500, MinTokens: 64, Arena: []int{63}, Snapshots: []ResumeCandidate{{63, 1}}}, ResumeChoice{}},
		{"a short tape does not hide a snapshot", ResumeInput{TargetTokens: 500, MinTokens: 64, Arena: []int{10}, Snapshots: []ResumeCandidate{{70, 1}}},
			ResumeChoice{ResumeSnapshot, 0, 70}},
		{"stops at the manifest's own tokens", ResumeInput{TargetTokens: 100, MinTokens: 64, Snapshots: []ResumeCandidate{{116, 1}}},
			ResumeChoice{ResumeSnapshot, 0, 100}},
	} {
		if got := ChooseResume(tc.in); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if ResumeNone.String() != "none" || ResumeArena.String() != "arena" || ResumeSnapshot.String() != "snapshot" {
		t.Error("ResumeSource names")
	}
}

// A resume never keeps more than the target's tokens nor less than
// MinTokens, and takes a source sharing the most.
func TestChooseResumeProperties(t *testing.T) {
	r := rand.New(rand.NewSource(14))
	for range 5000 {
		in := ResumeInput{TargetTokens: r.Intn(600), MinTokens: r.Intn(100)}
		best := 0
		for range r.Intn(4) {
			n := r.Intn(700)
			in.Arena = append(in.Arena, n)
			best = max(best, n)
		}
		for range r.Intn(4) {
			n := r.Intn(700)
			in.Snapshots = append(in.Snapshots, ResumeCandidate{n, int64(r.Intn(3))})
			best = max(best, n)
		}
		c := ChooseResume(in)
		if c.Source == ResumeNone {
			if in.TargetTokens >= in.MinTokens && best >= max(in.MinTokens, 1) {
				t.Fatalf("%+v: none though %d in common", in, best)
			}
			continue
		}
		if c.Tokens > in.TargetTokens || c.Tokens < in.MinTokens || c.Tokens != min(best, in.TargetTokens) {
			t.Fatalf("%+v: %+v (best %d)", in, c, best)
		}
	}
}

func TestAdoptionExtent(t *testing.T) {
	past := ResumePlan{ResumeChoice: ResumeChoice{Source: ResumeArena, Tokens: 132}, Upto: 1200}
	exact := func(n int) ResumePlan {
		return ResumePlan{ResumeChoice: ResumeChoice{Source: ResumeArena, Tokens: n}, Upto: n}
	}
	for _, tc := range []struct {
		name                     string
		plan                     ResumePlan
		blocks, held, tailCommon int
		upto, exact              int
	}{
		{"past the change: all it holds, its tail too", past, 1284, 1324, 132, 1324, 132},
		{"past the change, no tail", past, 1284, 1284, 132, 1284, 132},
		{"past the change, segments reaching its end", ResumePlan{ResumeChoice: ResumeChoice{Tokens: 132}, Upto: 1324}, 1284, 1324, 132, 1324, 132},
		{"the prompt goes on as the tail did", exact(1284), 1284, 1324, 1300, 1300, 1300},
		{"the prompt holds the whole tail and more", exact(1284), 1284, 1324, 1324, 1324, 1324},
		{"the prompt stops at the blocks' end", exact(1284), 1284, 1324, 1284, 1284, 1284},
		{"the prefix ends inside the blocks", exact(1000), 1284, 1324, 1000, 1000, 1000},
		{"no tail", exact(1284), 1284, 1284, 1284, 1284, 1284},
	} {
		upto, ex := AdoptionExtent(tc.plan, tc.blocks, tc.held, tc.tailCommon)
		if upto != tc.upto || ex != tc.exact {
			t.Errorf("%s: upto %d, exact %d; want %d, %d", tc.name, upto, ex, tc.upto, tc.exact)
		}
		if upto > tc.held || ex > upto {
			t.Errorf("%s: upto %d past what the tape holds (%d) or below the exact prefix %d", tc.name, upto, tc.held, ex)
		}
	}
}
