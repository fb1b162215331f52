package policy

import (
	"cmp"
	"errors"
	"math"
	"math/rand"
	"reflect"
	"slices"
	"testing"
)

// randomHotSetInput returns an arbitrary valid input: unique IDs and Seqs,
// scores with frequent ties, a mix of flags, budgets from tight to loose.
func randomHotSetInput(r *rand.Rand) HotSetInput {
	n := r.Intn(40)
	seqs := r.Perm(3 * (n + 1))[:n]
	in := HotSetInput{
		SinkTokens:   r.Intn(3) * r.Intn(8),
		RecentTokens: r.Intn(2) * r.Intn(120),
		SuffixTokens: r.Intn(64),
		MaxRetrieved: r.Intn(2) * r.Intn(6),
	}
	total := 0
	for i := range n {
		b := HotBlock{
			ID:       r.Uint64() >> uint(r.Intn(60)),
			Seq:      seqs[i],
			Tokens:   1 + r.Intn(64),
			Kind:     SegmentKind(1 + r.Intn(8)),
			Class:    CacheClass(r.Intn(4)),
			Score:    float64(r.Intn(6)) - 1,
			LastUsed: int64(r.Intn(4)),
			Hot:      r.Intn(2) == 0,
			Pinned:   r.Intn(10) == 0,
			Sink:     r.Intn(30) == 0,
			Recent:   r.Intn(15) == 0,
		}
		if r.Intn(3) == 0 {
			b.Score = r.NormFloat64() * 3
		}
		total += b.Tokens
		in.Blocks = append(in.Blocks, b)
	}
	// Make IDs unique.
	seen := map[uint64]bool{}
	for i := range in.Blocks {
		for seen[in.Blocks[i].ID] {
			in.Blocks[i].ID++
		}
		seen[in.Blocks[i].ID] = true
	}
	in.HotBudget = r.Intn(total + 200)
	if r.Intn(2) == 0 {
		in.TrainedWindow = 1 + r.Intn(total+200)
	}
	switch r.Intn(4) {
	case 0:
		in.MinScore = float64(r.Intn(4)) - 1
	case 1:
		in.MinScore = math.Inf(-1)
	}
	return in
}

// referenceProtected computes, independently of PlanHotSet, the IDs that
// must stay hot and their tokens.
func referenceProtected(in HotSetInput) (map[uint64]bool, int) {
	sorted := slices.SortedFunc(slices.Values(in.Blocks), func(a, b HotBlock) int { return cmp.Compare(a.Seq, b.Seq) })
	total := 0
	for _, b := range sorted {
		total += b.Tokens
	}
	prot, tokens, off := map[uint64]bool{}, 0, 0
	for _, b := range sorted {
		if b.Sink || b.Pinned || b.Recent || off < in.SinkTokens || off+b.Tokens > total-in.RecentTokens && in.RecentTokens > 0 {
			prot[b.ID] = true
			tokens += b.Tokens
		}
		off += b.Tokens
	}
	return prot, tokens
}

func TestPlanHotSetProperties(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		r := rand.New(rand.NewSource(seed))
		feasible, infeasible := 0, 0
		for iter := range 2500 {
			in := randomHotSetInput(r)
			p, err := PlanHotSet(in)
			prot, protTokens := referenceProtected(in)
			limit := in.HotBudget
			if in.TrainedWindow > 0 {
				limit = min(limit, in.TrainedWindow)
			}
			if protTokens+in.SuffixTokens > limit {
				infeasible++
				if !errors.Is(err, ErrHotBudget) {
					t.Fatalf("seed %d iter %d: protected %d + suffix %d > limit %d but err = %v", seed, iter, protTokens, in.SuffixTokens, limit, err)
				}
				continue
			}
			feasible++
			if err != nil {
				t.Fatalf("seed %d iter %d: %v", seed, iter, err)
			}
			checkPlanShape(t, in, p)
			checkPlanSets(t, in, p, prot)
			if t.Failed() {
				t.Fatalf("seed %d iter %d: input %+v", seed, iter, in)
			}
			// Determinism under shuffled input.
			shuffled := in
			shuffled.Blocks = slices.Clone(in.Blocks)
			r.Shuffle(len(shuffled.Blocks), func(i, j int) {
				shuffled.Blocks[i], shuffled.Blocks[j] = shuffled.Blocks[j], shuffled.Blocks[i]
			})
			if p2, err := PlanHotSet(shuffled); err != nil || !reflect.DeepEqual(p, p2) {
				t.Fatalf("seed %d iter %d: shuffled input gives a different plan (%v)", seed, iter, err)
			}
		}
		if feasible < 1000 || infeasible < 100 {
			t.Errorf("seed %d: %d feasible, %d infeasible inputs: generator too lopsided", seed, feasible, infeasible)
		}
	}
}

// checkPlanSets checks which blocks the plan keeps, admits and evicts.
func checkPlanSets(t *testing.T, in HotSetInput, p HotSetPlan, prot map[uint64]bool) {
	t.Helper()
	byID := map[uint64]HotBlock{}
	hot := map[uint64]bool{}
	for _, b := range in.Blocks {
		byID[b.ID] = b
		if b.Hot {
			hot[b.ID] = true
		}
	}
	after := map[uint64]bool{}
	retrieved := 0
	for _, e := range p.Layout {
		if after[e.ID] {
			t.Errorf("id %d twice in layout", e.ID)
		}
		after[e.ID] = true
		b := byID[e.ID]
		if e.Tokens != b.Tokens || e.Seq != b.Seq {
			t.Errorf("id %d: layout tokens/seq %d/%d, block %d/%d", e.ID, e.Tokens, e.Seq, b.Tokens, b.Seq)
		}
		if (e.Role != RoleRetrieved) != prot[e.ID] {
			t.Errorf("id %d: role %s but protected %v", e.ID, e.Role, prot[e.ID])
		}
		if e.Role == RoleRetrieved {
			retrieved++
			if b.Score < in.MinScore {
				t.Errorf("id %d retrieved with score %g < MinScore %g", e.ID, b.Score, in.MinScore)
			}
		}
	}
	for id := range prot {
		if !after[id] {
			t.Errorf("protected id %d not kept", id)
		}
	}
	if in.MaxRetrieved > 0 && retrieved > in.MaxRetrieved {
		t.Errorf("%d retrieved > MaxRetrieved %d", retrieved, in.MaxRetrieved)
	}
	// hot' = (hot − evicted) ∪ admitted, with Keep = hot ∩ hot'.
	want := map[uint64]bool{}
	for id := range hot {
		want[id] = true
	}
	evictedTokens := 0
	for _, id := range p.Evict {
		if !hot[id] || after[id] {
			t.Errorf("evicted id %d: hot %v, in layout %v", id, hot[id], after[id])
		}
		delete(want, id)
		evictedTokens += byID[id].Tokens
	}
	admittedTokens := 0
	for _, id := range p.Admit {
		if hot[id] {
			t.Errorf("admitted id %d was hot", id)
		}
		want[id] = true
		admittedTokens += byID[id].Tokens
	}
	for _, id := range p.Keep {
		if !hot[id] {
			t.Errorf("kept id %d was not hot", id)
		}
	}
	if !reflect.DeepEqual(want, after) || len(p.Keep)+len(p.Admit) != len(p.Layout) {
		t.Errorf("hot' = %v, want (hot − evicted) ∪ admitted = %v", after, want)
	}
	if admittedTokens != p.AdmittedTokens || evictedTokens != p.EvictedTokens {
		t.Errorf("admitted/evicted tokens %d/%d, want %d/%d", p.AdmittedTokens, p.EvictedTokens, admittedTokens, evictedTokens)
	}
	var evicted []HotBlock
	for _, id := range p.Evict {
		evicted = append(evicted, byID[id])
	}
	if !slices.Equal(EvictionOrder(evicted), p.Evict) {
		t.Errorf("Evict %v not in eviction order", p.Evict)
	}
	// Greedy fill: an unchosen candidate did not fit, or the cap was hit.
	if in.MaxRetrieved == 0 || retrieved < in.MaxRetrieved {
		for _, b := range in.Blocks {
			if !prot[b.ID] && !after[b.ID] && b.Score >= in.MinScore && b.Tokens <= p.FreeTokens {
				t.Errorf("candidate id %d (%d tokens, score %g) left out with %d tokens free", b.ID, b.Tokens, b.Score, p.FreeTokens)
			}
		}
	}
}

func TestEvictionOrderProperties(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	for iter := range 3000 {
		in := randomHotSetInput(r)
		if r.Intn(4) == 0 && len(in.Blocks) > 0 {
			in.Blocks[0].Score = math.NaN()
		}
		got := EvictionOrder(in.Blocks)
		byID := map[uint64]HotBlock{}
		for _, b := range in.Blocks {
			byID[b.ID] = b
		}
		if len(got) != len(in.Blocks) {
			t.Fatalf("iter %d: %d ids for %d blocks", iter, len(got), len(in.Blocks))
		}
		for i := 1; i < len(got); i++ {
			a, b := byID[got[i-1]], byID[got[i]]
			if c := compareEviction(a, b); c > 0 {
				t.Fatalf("iter %d: %d before %d out of order", iter, a.ID, b.ID)
			}
			pa, pb := protectedFlag(a), protectedFlag(b)
			if pa > pb || pa == pb && a.EffectiveClass().EvictionRank() > b.EffectiveClass().EvictionRank() {
				t.Fatalf("iter %d: %d (%s) before %d (%s)", iter, a.ID, a.EffectiveClass(), b.ID, b.EffectiveClass())
			}
		}
		r.Shuffle(len(in.Blocks), func(i, j int) { in.Blocks[i], in.Blocks[j] = in.Blocks[j], in.Blocks[i] })
		if !slices.Equal(EvictionOrder(in.Blocks), got) {
			t.Fatalf("iter %d: order depends on input order", iter)
		}
	}
}
