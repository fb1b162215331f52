package engine

import (
	"math/rand"
	"testing"
)

// TestPosSetMatchesBitmap drives PosSet and a plain bitmap with the same
// random operations and checks they always agree.
func TestPosSetMatchesBitmap(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var s PosSet
	ref := make([]bool, 300)
	for step := 0; step < 5000; step++ {
		lo := rng.Intn(290)
		hi := lo + rng.Intn(300-lo)
		if rng.Intn(2) == 0 {
			s.Add(lo, hi)
			for p := lo; p < hi; p++ {
				ref[p] = true
			}
		} else {
			want := 0
			for p := lo; p < hi; p++ {
				if ref[p] {
					want++
				}
				ref[p] = false
			}
			if got := s.Remove(lo, hi); got != want {
				t.Fatalf("step %d: Remove(%d,%d)=%d want %d", step, lo, hi, got, want)
			}
		}
		n, mx := 0, 0
		for p, v := range ref {
			if v {
				n++
				mx = p + 1
			}
			if s.Contains(p) != v {
				t.Fatalf("step %d: Contains(%d)=%v want %v", step, p, s.Contains(p), v)
			}
		}
		if s.Len() != n || s.Max() != mx {
			t.Fatalf("step %d: Len=%d Max=%d want %d %d", step, s.Len(), s.Max(), n, mx)
		}
		for i := 1; i < len(s.iv); i++ {
			if s.iv[i-1].hi >= s.iv[i].lo {
				t.Fatalf("spans not disjoint/non-adjacent: %v", s.iv)
			}
		}
	}
}
