package layout

import (
	"testing"

	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Every residency is one combination of "in the engine" and a copy tier,
// and the transitions keep the copy while moving in and out of the engine.
func TestResidencyTransitions(t *testing.T) {
	for _, in := range []bool{false, true} {
		for _, where := range []tiers.Tier{tiers.None, tiers.Arena, tiers.SSD} {
			r := residencyOf(in, where)
			if r.inEngine() != in || r.copyTier() != where {
				t.Fatalf("residencyOf(%v, %v) = %v: in engine %v, copy %v", in, where, r, r.inEngine(), r.copyTier())
			}
			if e := r.evicted(); e.inEngine() || e.copyTier() != where {
				t.Fatalf("%v evicted = %v", r, e)
			}
			if a := r.admitted(); !a.inEngine() || a.copyTier() != where {
				t.Fatalf("%v admitted = %v", r, a)
			}
			if d := r.withCopy(tiers.None); d.inEngine() != in || d.copyTier() != tiers.None {
				t.Fatalf("%v without its copy = %v", r, d)
			}
		}
	}
	if resHotOnly.evicted() != resLost || resSpilled.admitted() != resHotSpilled || resHotParked.evicted() != resParked {
		t.Fatal("named transitions")
	}
}

func TestTapeKeepClipsSpansAndExpiry(t *testing.T) {
	tp := NewTape()
	tp.tokens = []int32{1, 2, 3, 4, 5, 6}
	tp.spans = []Span{{Start: 0, End: 3}, {Start: 3, End: 6}}
	tp.expireFrom, tp.logitsAt = 4, 6
	if n := tp.ReusablePrefix(Prompt{Tokens: []int32{1, 2, 3, 4, 5, 6, 7}}); n != 4 {
		t.Fatalf("reusable prefix %d, want 4 (stops at the expired segment)", n)
	}
	tp.Keep(4)
	if len(tp.tokens) != 4 || len(tp.spans) != 2 || tp.spans[1].End != 4 || tp.expireFrom != -1 || tp.logitsAt != -1 {
		t.Fatalf("after Keep(4): %+v", tp)
	}
}

func TestTapeApproxFrom(t *testing.T) {
	tp := NewTape()
	tp.tokens = []int32{1, 2, 3, 4, 5, 6}
	tp.markApprox(4)
	tp.markApprox(5) // the earliest wins
	if tp.ApproxFrom() != 4 || tp.ExactTokens(6) != 4 || tp.ExactTokens(3) != 3 {
		t.Fatalf("approx from %d, exact %d", tp.ApproxFrom(), tp.ExactTokens(6))
	}
	target := Prompt{Tokens: []int32{1, 2, 3, 4, 5, 6, 7}}
	if n := tp.ReusablePrefix(target); n != 6 {
		t.Fatalf("reusable %d, want 6", n)
	}
	target.Exact = true
	if n := tp.ReusablePrefix(target); n != 4 {
		t.Fatalf("exact reusable %d, want 4 (stops at the approximate KV)", n)
	}
	tp.Keep(4)
	if tp.ApproxFrom() != -1 {
		t.Fatalf("approx from %d after Keep(4)", tp.ApproxFrom())
	}
}
