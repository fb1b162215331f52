package policy

import (
	"slices"
	"testing"
)

// Only tapes with spans under the prompt's key lend segments, newest
// first, at most MaxOrphanDonors.
func TestChooseOrphanDonors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cands []OrphanDonorCandidate
		want  []int
	}{
		{"none", nil, nil},
		{"no spans, another key", []OrphanDonorCandidate{{0, true, 1}, {3, false, 2}}, nil},
		{"newest first", []OrphanDonorCandidate{{3, true, 1}, {0, true, 9}, {5, true, 4}}, []int{2, 0}},
		{"bounded", []OrphanDonorCandidate{{1, true, 1}, {1, true, 2}, {1, true, 3}, {1, true, 4}, {1, true, 5}, {1, true, 6}}, []int{5, 4, 3, 2}},
	} {
		if got := ChooseOrphanDonors(tc.cands); !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
