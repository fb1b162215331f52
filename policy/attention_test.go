package policy

import (
	"errors"
	"math"
	"math/rand"
	"reflect"
	"slices"
	"testing"
)

var needleShape = AttentionShape{Layers: 3, Heads: 8, KVHeads: 8, HeadDim: 16}

func TestPlanKeySummary(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shape  AttentionShape
		block  int
		kv     KVType
		frac   float64
		layers []int
		reps   int
	}{
		// 3 × 8 × 16 f16 K and V rows per token, 64 tokens: 98,304 bytes;
		// 1/16 is 6,144 = every key of one layer: 64 tokens × 8 heads ×
		// (8 bytes of 4-bit codes + a 4-byte scale).
		{"needle.gguf f16", needleShape, 64, KVTypeF16, DefaultKeySummaryFraction, []int{1}, 64},
		{"needle.gguf f32", needleShape, 64, KVTypeF32, DefaultKeySummaryFraction, []int{1, 2}, 64},
		// q8_0 halves the budget: 34 keys per head of the middle layer.
		{"needle.gguf q8_0", needleShape, 64, KVTypeQ8_0, DefaultKeySummaryFraction, []int{1}, 34},
		{"needle.gguf 128-token blocks", needleShape, 128, KVTypeF16, DefaultKeySummaryFraction, []int{1}, 128},
		{"stories260K f16", AttentionShape{Layers: 5, Heads: 8, KVHeads: 4, HeadDim: 8}, 64, KVTypeF16, DefaultKeySummaryFraction, []int{2}, 64},
		// 68 bytes a key of 128: 15 of 32 layers, around the middle.
		{"7B GQA f16", AttentionShape{Layers: 32, Heads: 32, KVHeads: 8, HeadDim: 128}, 64, KVTypeF16, DefaultKeySummaryFraction, seqFrom(9, 15), 64},
		{"small blocks, more layers", AttentionShape{Layers: 8, Heads: 4, KVHeads: 4, HeadDim: 8}, 16, KVTypeF16, DefaultKeySummaryFraction, []int{4, 5}, 16},
		{"tiny budget: one layer, one key", AttentionShape{Layers: 4, Heads: 4, KVHeads: 4, HeadDim: 8}, 1, KVTypeF16, DefaultKeySummaryFraction, []int{2}, 1},
		{"whole block", needleShape, 4, KVTypeF32, 1, []int{0, 1, 2}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanKeySummary(tc.shape, tc.block, tc.kv, tc.frac)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Layers, tc.layers) || p.Reps != tc.reps {
				t.Fatalf("layers %v, %d keys; want %v, %d", p.Layers, p.Reps, tc.layers, tc.reps)
			}
			if want := int64(len(p.Layers)*tc.shape.KVHeads*p.Reps) * KeyVectorBytes(tc.shape.HeadDim); p.Bytes != want {
				t.Fatalf("bytes %d, want %d", p.Bytes, want)
			}
		})
	}
	for _, bad := range []struct {
		shape AttentionShape
		block int
		kv    KVType
		frac  float64
	}{
		{AttentionShape{Layers: 3, Heads: 6, KVHeads: 4, HeadDim: 16}, 64, KVTypeF16, 0.1},
		{AttentionShape{}, 64, KVTypeF16, 0.1},
		{needleShape, 0, KVTypeF16, 0.1},
		{needleShape, 64, KVTypeF16, 0},
		{needleShape, 64, KVTypeF16, 1.5},
		{needleShape, 64, KVTypeF16, math.NaN()},
		{needleShape, 64, KVType(99), 0.1},
	} {
		if _, err := PlanKeySummary(bad.shape, bad.block, bad.kv, bad.frac); !errors.Is(err, ErrInvalidHotSet) {
			t.Errorf("%+v: err %v, want ErrInvalidHotSet", bad, err)
		}
	}
}

func seq(n int) []int { return seqFrom(0, n) }

func seqFrom(a, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = a + i
	}
	return out
}

func TestPlanKeySummaryStaysInBudget(t *testing.T) {
	// Whenever one key per KV head of one layer fits the budget, the
	// summary fits it, and it never holds more keys than the block has
	// tokens nor a layer twice.
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		kvh := 1 + r.Intn(8)
		sh := AttentionShape{Layers: 1 + r.Intn(40), KVHeads: kvh, Heads: kvh * (1 + r.Intn(4)), HeadDim: 4 << r.Intn(6)}
		block, kv, frac := 1+r.Intn(256), KVType(r.Intn(3)), r.Float64()*0.5+0.001
		p, err := PlanKeySummary(sh, block, kv, frac)
		if err != nil {
			t.Fatal(sh, err)
		}
		budget := frac * float64(KVBytesPerToken(sh.Layers, sh.KVHeads, sh.HeadDim, kv)*int64(block))
		oneKey := float64(int64(sh.KVHeads) * KeyVectorBytes(sh.HeadDim))
		if budget >= oneKey && float64(p.Bytes) > budget {
			t.Fatalf("%+v block %d %v frac %g: %d bytes over the budget %.0f", sh, block, kv, frac, p.Bytes, budget)
		}
		if p.Reps < 1 || p.Reps > block || len(p.Layers) < 1 {
			t.Fatalf("%+v block %d: plan %+v", sh, block, p)
		}
		for j, l := range p.Layers {
			if l < 0 || l >= sh.Layers || j > 0 && l <= p.Layers[j-1] {
				t.Fatalf("%+v: layers %v", sh, p.Layers)
			}
		}
		if _, err := NewAttentionIndex(sh, p); err != nil {
			t.Fatal(err)
		}
	}
}

// randomVectors fills rows × layers × heads × dim with N(0, 1) values.
func randomVectors(r *rand.Rand, rows, layers, heads, dim int) HeadVectors {
	v := HeadVectors{Rows: rows, Layers: layers, Heads: heads, Dim: dim, Data: make([]float32, rows*layers*heads*dim)}
	for i := range v.Data {
		v.Data[i] = float32(r.NormFloat64())
	}
	return v
}

func TestSummarizeKeys(t *testing.T) {
	// Four tokens of one layer and head: three near the origin, one far.
	keys := HeadVectors{Rows: 4, Layers: 1, Heads: 1, Dim: 2, Data: []float32{1, 0, 0, 1, -1, 0, 10, 10}}
	s, err := SummarizeKeys(keys, 3)
	if err != nil {
		t.Fatal(err)
	}
	// The mean, the outlier, then the farthest from both, each within
	// half a quantisation step (absmax / 7 / 2).
	checkKeys(t, s, 0, 0, [][]float32{{2.5, 2.75}, {10, 10}, {-1, 0}})
	if s.Bytes() != 3*(1+4) {
		t.Fatalf("%d bytes", s.Bytes())
	}
	// As many keys as tokens or more: all of them, in token order, the
	// last repeated.
	if s, err = SummarizeKeys(keys, 5); err != nil {
		t.Fatal(err)
	}
	checkKeys(t, s, 0, 0, [][]float32{{1, 0}, {0, 1}, {-1, 0}, {10, 10}, {10, 10}})
	// Layers and heads are kept apart; a zero key stays zero.
	r := rand.New(rand.NewSource(2))
	v := randomVectors(r, 64, 3, 8, 15)
	clear(v.Vec(5, 2, 7))
	if s, err = SummarizeKeys(v, 64); err != nil {
		t.Fatal(err)
	}
	for l := 0; l < 3; l++ {
		for g := 0; g < 8; g++ {
			var want [][]float32
			for row := 0; row < 64; row++ {
				want = append(want, v.Vec(row, l, g))
			}
			checkKeys(t, s, l, g, want)
		}
	}
	if s.Bytes() != 3*8*64*KeyVectorBytes(15) {
		t.Fatalf("%d bytes", s.Bytes())
	}
	for _, bad := range []HeadVectors{{}, {Rows: 2, Layers: 1, Heads: 1, Dim: 2, Data: []float32{1}}} {
		if _, err := SummarizeKeys(bad, 2); !errors.Is(err, ErrInvalidHotSet) {
			t.Errorf("%+v: err %v, want ErrInvalidHotSet", bad, err)
		}
	}
}

// checkKeys checks that s holds want for (layer, head), each component
// within half a 4-bit step of its vector's absmax.
func checkKeys(t *testing.T, s KeySummary, layer, head int, want [][]float32) {
	t.Helper()
	got := make([]float32, s.Dim)
	for k, w := range want {
		s.Key(got, layer, head, k)
		var top float64
		for _, x := range w {
			top = max(top, math.Abs(float64(x)))
		}
		for d := range w {
			if math.Abs(float64(got[d]-w[d])) > top/14+1e-6 {
				t.Fatalf("layer %d head %d key %d: %v, want %v", layer, head, k, got, w)
			}
		}
	}
}

// needleIndex builds an index of n random blocks of 64 tokens for shape,
// block `needle` holding at token 17, in every layer, for KV head g, the
// key key.
func needleIndex(t *testing.T, r *rand.Rand, shape AttentionShape, n, needle, g int, key []float32) *AttentionIndex {
	t.Helper()
	p, err := PlanKeySummary(shape, 64, KVTypeF16, DefaultKeySummaryFraction)
	if err != nil {
		t.Fatal(err)
	}
	x, err := NewAttentionIndex(shape, p)
	if err != nil {
		t.Fatal(err)
	}
	for b := 0; b < n; b++ {
		keys := randomVectors(r, 64, len(p.Layers), shape.KVHeads, shape.HeadDim)
		keys.LayerIDs = p.Layers
		if b == needle {
			for l := range p.Layers {
				copy(keys.Vec(17, l, g), key)
			}
		}
		if err := x.Put(uint64(100+b), keys); err != nil {
			t.Fatal(err)
		}
	}
	return x
}

// queriesFor returns rows query rows for shape over the plan's layers,
// small noise everywhere and q on query head h.
func queriesFor(r *rand.Rand, x *AttentionIndex, rows, h int, q []float32) HeadVectors {
	v := randomVectors(r, rows, len(x.Plan().Layers), x.shape.Heads, x.shape.HeadDim)
	v.LayerIDs = x.Plan().Layers
	for i := range v.Data {
		v.Data[i] *= 0.1
	}
	for t := 0; t < rows; t++ {
		for l := range x.Plan().Layers {
			copy(v.Vec(t, l, h), q)
		}
	}
	return v
}

func TestAttentionNeedleRanksFirst(t *testing.T) {
	// One key of one block points where the turn's queries look: that
	// block ranks first among 500, on needle.gguf's shape and on a GQA
	// shape, and scores lie within (0, 1].
	for _, shape := range []AttentionShape{needleShape, {Layers: 4, Heads: 8, KVHeads: 2, HeadDim: 32}} {
		for seed := int64(1); seed <= 5; seed++ {
			r := rand.New(rand.NewSource(seed))
			dir := make([]float32, shape.HeadDim)
			for d := range dir {
				dir[d] = float32(r.NormFloat64())
			}
			key := scaled(dir, 3)
			h := r.Intn(shape.Heads)
			g := h / (shape.Heads / shape.KVHeads)
			needle := r.Intn(500)
			x := needleIndex(t, r, shape, 500, needle, g, key)
			scores, err := x.Score(queriesFor(r, x, AttentionQueryRows, h, scaled(dir, 3)))
			if err != nil {
				t.Fatal(err)
			}
			if len(scores) != 500 || scores[0].ID != uint64(100+needle) {
				t.Fatalf("%+v seed %d: first %+v, want block %d", shape, seed, scores[0], 100+needle)
			}
			for i, s := range scores {
				if s.Score <= 0 || s.Score > 1 || i > 0 && s.Score > scores[i-1].Score {
					t.Fatalf("score %d: %+v", i, s)
				}
			}
		}
	}
}

func TestAttentionQueryHeadReadsItsKVHead(t *testing.T) {
	// GQA: 8 query heads over 2 KV heads. The needle's key is on KV head
	// 1; a query on head 5 (group 1) finds it, the same query on head 2
	// (group 0) does not.
	shape := AttentionShape{Layers: 2, Heads: 8, KVHeads: 2, HeadDim: 16}
	r := rand.New(rand.NewSource(3))
	dir := make([]float32, 16)
	for d := range dir {
		dir[d] = float32(r.NormFloat64())
	}
	x := needleIndex(t, r, shape, 200, 7, 1, scaled(dir, 3))
	for _, tc := range []struct {
		head  int
		first bool
	}{{5, true}, {4, true}, {7, true}, {2, false}, {0, false}} {
		s, err := x.Score(queriesFor(rand.New(rand.NewSource(4)), x, 2, tc.head, scaled(dir, 3)))
		if err != nil {
			t.Fatal(err)
		}
		if got := s[0].ID == 107; got != tc.first {
			t.Errorf("query head %d: needle first %v, want %v (first %+v)", tc.head, got, tc.first, s[0])
		}
	}
}

func scaled(v []float32, k float32) []float32 {
	out := make([]float32, len(v))
	for i := range v {
		out[i] = v[i] * k
	}
	return out
}

func TestAttentionIndexOrderAndShapes(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	// Every layer, four keys of each 64-token block: the mean and three
	// picked.
	p, _ := PlanKeySummary(needleShape, 4, KVTypeF32, 1)
	blocks := make([]HeadVectors, 40)
	for i := range blocks {
		blocks[i] = randomVectors(r, 64, 3, 8, 16)
	}
	q := randomVectors(r, 4, 3, 8, 16)
	build := func(order []int) *AttentionIndex {
		x, err := NewAttentionIndex(needleShape, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range order {
			if err := x.Put(uint64(i), blocks[i]); err != nil {
				t.Fatal(err)
			}
		}
		return x
	}
	a, b := build(seq(40)), build(r.Perm(40))
	sa, _ := a.Score(q)
	sb, _ := b.Score(q)
	if !reflect.DeepEqual(sa, sb) {
		t.Fatal("scores depend on the order blocks were added in")
	}
	if a.Len() != 40 || a.Bytes() != 40*p.Bytes || !a.Has(39) || a.Has(40) {
		t.Fatalf("len %d, bytes %d", a.Len(), a.Bytes())
	}
	if !a.Remove(3) || a.Remove(3) || a.Len() != 39 || a.Has(3) {
		t.Fatal("Remove")
	}
	s, _ := a.Score(q)
	for _, x := range s {
		if x.ID == 3 {
			t.Fatal("a removed block is scored")
		}
	}
	// Replacing a block's summary keeps one entry.
	if err := a.Put(5, blocks[6]); err != nil || a.Len() != 39 {
		t.Fatalf("replace: %v, len %d", err, a.Len())
	}
	// No query rows: every block 0.
	s, err := a.Score(HeadVectors{Layers: 3, Heads: 8, Dim: 16})
	if err != nil || len(s) != 39 || s[0].Score != 0 {
		t.Fatalf("empty query: %v %v", s[:1], err)
	}
	// Wrong shapes change nothing.
	for _, bad := range []HeadVectors{
		randomVectors(r, 64, 2, 8, 16),           // too few layers
		randomVectors(r, 64, 3, 4, 16),           // KV heads
		randomVectors(r, 64, 3, 8, 8),            // head size
		{Rows: 64, Layers: 3, Heads: 8, Dim: 16}, // no data
		{Rows: 1, Layers: 3, Heads: 8, Dim: 16, LayerIDs: []int{0, 1, 3}, Data: make([]float32, 3*8*16)}, // other layers
	} {
		if err := a.Put(77, bad); !errors.Is(err, ErrInvalidHotSet) || a.Has(77) {
			t.Errorf("keys %dx%dx%dx%d %v: err %v", bad.Rows, bad.Layers, bad.Heads, bad.Dim, bad.LayerIDs, err)
		}
		if _, err := a.Score(bad); !errors.Is(err, ErrInvalidHotSet) {
			t.Errorf("queries %dx%dx%dx%d: err %v", bad.Rows, bad.Layers, bad.Heads, bad.Dim, err)
		}
	}
	if _, err := NewAttentionIndex(needleShape, KeySummaryPlan{Layers: []int{2, 1}, Reps: 2}); !errors.Is(err, ErrInvalidHotSet) {
		t.Errorf("unordered layers: %v", err)
	}
	if _, err := NewAttentionIndex(needleShape, KeySummaryPlan{Layers: []int{3}, Reps: 2}); !errors.Is(err, ErrInvalidHotSet) {
		t.Errorf("layer past the model: %v", err)
	}
}

func TestFuseScores(t *testing.T) {
	lex := []BlockScore{{ID: 1, Score: 90}, {ID: 2, Score: 10}, {ID: 3, Score: 0}}
	att := []BlockScore{{ID: 2, Score: 0.5}, {ID: 1, Score: 0.4}, {ID: 3, Score: 0.1}}
	for _, tc := range []struct {
		name string
		m    FusionMethod
		runs [][]BlockScore
		want []BlockScore
	}{
		{"max-normalized: the sure scorer wins", FuseMaxNormalized, [][]BlockScore{lex, att},
			[]BlockScore{{ID: 1, Score: 1 + 0.8}, {ID: 2, Score: 10.0/90 + 1}, {ID: 3, Score: 0.2}}},
		{"reciprocal rank: a tie broken by ID", FuseReciprocalRank, [][]BlockScore{lex, att},
			[]BlockScore{{ID: 1, Score: 1.0/61 + 1.0/62}, {ID: 2, Score: 1.0/62 + 1.0/61}, {ID: 3, Score: 1.0 / 63}}},
		{"one ranking passes through in order", FuseMaxNormalized, [][]BlockScore{att},
			[]BlockScore{{ID: 2, Score: 1}, {ID: 1, Score: 0.8}, {ID: 3, Score: 0.2}}},
		{"a ranking of zeros is ignored", FuseMaxNormalized, [][]BlockScore{{{ID: 4, Score: 0}, {ID: 5, Score: 0}}, {{ID: 5, Score: 2}}},
			[]BlockScore{{ID: 5, Score: 1}, {ID: 4, Score: 0}}},
		{"equal scores share a rank", FuseReciprocalRank, [][]BlockScore{{{ID: 1, Score: 3}, {ID: 2, Score: 3}, {ID: 3, Score: 1}}},
			[]BlockScore{{ID: 1, Score: 1.0 / 61}, {ID: 2, Score: 1.0 / 61}, {ID: 3, Score: 1.0 / 63}}},
		{"nothing", FuseReciprocalRank, nil, []BlockScore{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FuseScores(tc.m, tc.runs...)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i].ID != tc.want[i].ID || math.Abs(got[i].Score-tc.want[i].Score) > 1e-12 {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
	if DefaultFusion.String() != "max-normalized" || FuseReciprocalRank.String() != "reciprocal-rank" {
		t.Fatal("names")
	}
}

func TestAttentionScoreMatchesItsDefinition(t *testing.T) {
	// Keys with integer components and absmax 7 survive the 4-bit codes
	// exactly, so the index must give what the formula says, computed
	// here directly: exp(mean over (t, l) of ln(mean over h of the
	// softmax over blocks of max over keys of q·k/√d)).
	shape := AttentionShape{Layers: 3, Heads: 4, KVHeads: 2, HeadDim: 5} // odd: the last code byte holds one component
	plan := KeySummaryPlan{Layers: []int{0, 2}, Reps: 5, Bytes: 2 * 2 * 5 * KeyVectorBytes(5)}
	r := rand.New(rand.NewSource(9))
	for trial := 0; trial < 20; trial++ {
		x, err := NewAttentionIndex(shape, plan)
		if err != nil {
			t.Fatal(err)
		}
		const blocks = 7
		var all []HeadVectors
		for b := 0; b < blocks; b++ {
			k := HeadVectors{Rows: 5, Layers: 2, Heads: 2, Dim: 5, LayerIDs: plan.Layers, Data: make([]float32, 5*2*2*5)}
			for v := 0; v < len(k.Data); v += 5 {
				for d := 0; d < 5; d++ {
					k.Data[v+d] = float32(r.Intn(15) - 7)
				}
				k.Data[v+r.Intn(5)] = 7
			}
			all = append(all, k)
			if err := x.Put(uint64(10+b), k); err != nil {
				t.Fatal(err)
			}
		}
		q := randomVectors(r, 3, 2, 4, 5)
		q.LayerIDs = plan.Layers
		got, err := x.Score(q)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float64, blocks)
		for tt := 0; tt < 3; tt++ {
			for l := 0; l < 2; l++ {
				pooled := make([]float64, blocks)
				for h := 0; h < 4; h++ {
					z := make([]float64, blocks)
					var sum float64
					for b, k := range all {
						z[b] = math.Inf(-1)
						for row := 0; row < 5; row++ {
							var dot float64
							for d, v := range q.Vec(tt, l, h) {
								dot += float64(v) * float64(k.Vec(row, l, h/2)[d])
							}
							z[b] = max(z[b], dot/math.Sqrt(5))
						}
						sum += math.Exp(z[b])
					}
					for b := range z {
						pooled[b] += math.Exp(z[b]) / sum / 4
					}
				}
				for b := range pooled {
					want[b] += math.Log(pooled[b]) / 6
				}
			}
		}
		for _, g := range got {
			if w := math.Exp(want[g.ID-10]); math.Abs(g.Score-w) > 1e-5*w {
				t.Fatalf("trial %d block %d: score %g, want %g", trial, g.ID, g.Score, w)
			}
		}
	}
}

// BenchmarkAttentionScore200k scores 3,125 blocks (200k tokens of 64-token
// blocks) on needle.gguf's shape and plan: what a turn at 200k costs.
func BenchmarkAttentionScore200k(b *testing.B) {
	r := rand.New(rand.NewSource(1))
	p, _ := PlanKeySummary(needleShape, 64, KVTypeF16, DefaultKeySummaryFraction)
	x, _ := NewAttentionIndex(needleShape, p)
	for i := 0; i < 3125; i++ {
		k := randomVectors(r, 64, len(p.Layers), 8, 16)
		k.LayerIDs = p.Layers
		if err := x.Put(uint64(i), k); err != nil {
			b.Fatal(err)
		}
	}
	q := randomVectors(r, AttentionQueryRows, len(p.Layers), 8, 16)
	q.LayerIDs = p.Layers
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := x.Score(q); err != nil {
			b.Fatal(err)
		}
	}
}
