package policy

import (
	"errors"
	"math"
	"math/rand"
	"reflect"
	"testing"
)

var _ Scorer = (*BM25Index)(nil)

func newTestIndex(t testing.TB) *BM25Index {
	t.Helper()
	x, err := NewBM25Index(DefaultBM25Options())
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// randomBlocks returns n blocks of size random tokens below vocab.
func randomBlocks(r *rand.Rand, n, size, vocab int) [][]int32 {
	blocks := make([][]int32, n)
	for i := range blocks {
		blocks[i] = randomTokens(r, size, vocab)
	}
	return blocks
}

func randomTokens(r *rand.Rand, n, vocab int) []int32 {
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32(r.Intn(vocab))
	}
	return toks
}

func TestBM25NeedleRanksFirst(t *testing.T) {
	// A 4-token sequence of one block, inside queries of 4, 32 and 200
	// random tokens, among 1000 blocks of 64 random tokens (vocabulary 512):
	// with the default options at the query's end (where a turn asks),
	// and anywhere in it when every query position weighs alike.
	anywhere := DefaultBM25Options()
	anywhere.QueryHalfLife = 0
	for _, tc := range []struct {
		name  string
		opts  BM25Options
		atEnd bool
	}{{"defaults, at the end", DefaultBM25Options(), true}, {"half-life 0, anywhere", anywhere, false}} {
		for seed := int64(1); seed <= 8; seed++ {
			r := rand.New(rand.NewSource(seed))
			x, err := NewBM25Index(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			blocks := randomBlocks(r, 1000, 64, 512)
			for i, b := range blocks {
				x.Add(uint64(i), b)
			}
			for _, qlen := range []int{4, 32, 200} {
				target := r.Intn(len(blocks))
				at := r.Intn(64 - 4 + 1)
				query := randomTokens(r, qlen, 512)
				where := qlen - 4
				if !tc.atEnd {
					where = r.Intn(qlen - 4 + 1)
				}
				copy(query[where:], blocks[target][at:at+4])
				scores := x.Score(query)
				if len(scores) != 1000 || scores[0].ID != uint64(target) {
					rank := -1
					for i, s := range scores {
						if s.ID == uint64(target) {
							rank = i + 1
						}
					}
					t.Errorf("%s: seed %d, query %d tokens: needle block %d ranks %d (top %+v)", tc.name, seed, qlen, target, rank, scores[:3])
				}
			}
		}
	}
}

func TestBM25Deterministic(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	blocks := randomBlocks(r, 300, 48, 200)
	query := randomTokens(r, 100, 200)
	a := newTestIndex(t)
	for i, b := range blocks {
		a.Add(uint64(i), b)
	}
	// b gets the blocks in another order, with churn: junk added and
	// removed, and some blocks added twice.
	b := newTestIndex(t)
	for _, i := range r.Perm(len(blocks)) {
		b.Add(uint64(1000+i), randomTokens(r, 10, 200))
		b.Add(uint64(i), blocks[(i+1)%len(blocks)])
		b.Add(uint64(i), blocks[i])
	}
	for i := range blocks {
		b.Remove(uint64(1000 + i))
	}
	first := a.Score(query)
	if again := a.Score(query); !reflect.DeepEqual(first, again) {
		t.Error("scoring twice differs")
	}
	if other := b.Score(query); !reflect.DeepEqual(first, other) {
		t.Error("insertion order or churn changes scores")
	}
	for i := 1; i < len(first); i++ {
		if first[i-1].Score < first[i].Score || first[i-1].Score == first[i].Score && first[i-1].ID > first[i].ID {
			t.Fatalf("scores not sorted at %d: %+v, %+v", i, first[i-1], first[i])
		}
	}
}

func TestBM25Remove(t *testing.T) {
	x := newTestIndex(t)
	x.Add(1, []int32{1, 2, 3, 4})
	x.Add(2, []int32{1, 2, 3, 5})
	x.Add(3, []int32{9, 9, 9})
	if !x.Remove(1) || x.Remove(1) || x.Remove(42) {
		t.Error("Remove reports wrong results")
	}
	scores := x.Score([]int32{1, 2, 3, 4})
	if x.Len() != 2 || len(scores) != 2 || scores[0].ID != 2 || scores[1].ID != 3 || scores[1].Score != 0 {
		t.Errorf("after Remove: len %d, scores %+v", x.Len(), scores)
	}
	// The index after removal equals one that never held block 1.
	y := newTestIndex(t)
	y.Add(2, []int32{1, 2, 3, 5})
	y.Add(3, []int32{9, 9, 9})
	if got := y.Score([]int32{1, 2, 3, 4}); !reflect.DeepEqual(got, scores) {
		t.Errorf("scores %+v, fresh index %+v", scores, got)
	}
	x.Remove(2)
	x.Remove(3)
	if got := x.Score([]int32{1}); x.Len() != 0 || len(got) != 0 || len(x.postings) != 0 || x.tokens != 0 {
		t.Errorf("empty index: len %d, scores %v, %d postings, %d tokens", x.Len(), got, len(x.postings), x.tokens)
	}
}

func TestBM25EmptyQuery(t *testing.T) {
	x := newTestIndex(t)
	r := rand.New(rand.NewSource(1))
	for i, b := range randomBlocks(r, 20, 16, 50) {
		x.Add(uint64(i), b)
	}
	x.Add(99, nil) // an empty block scores 0 but is listed
	for _, q := range [][]int32{nil, {}} {
		scores := x.Score(q)
		if len(scores) != 21 {
			t.Fatalf("%d scores, want 21", len(scores))
		}
		for i, s := range scores {
			if s.Score != 0 || i > 0 && scores[i-1].ID >= s.ID {
				t.Fatalf("empty query: %+v", scores)
			}
		}
	}
	if got := Scores(x.Score(nil)); len(got) != 21 || got[99] != 0 {
		t.Errorf("Scores = %v", got)
	}
}

func TestBM25CommonNgramsWeighLittle(t *testing.T) {
	// Token 7 is in every block, token 8 in one. A query for each gives
	// the block holding both a much larger score for the rare token.
	x := newTestIndex(t)
	for i := range 50 {
		x.Add(uint64(i), []int32{7, int32(100 + i), int32(200 + i)})
	}
	x.Add(50, []int32{7, 8, 300})
	common, rare := Scores(x.Score([]int32{7})), Scores(x.Score([]int32{8}))
	if !(common[50] > 0 && rare[50] > 10*common[50]) {
		t.Errorf("common-token score %g, rare-token score %g", common[50], rare[50])
	}
	// An exact bigram beats the same two tokens apart.
	y := newTestIndex(t)
	y.Add(1, []int32{5, 6, 0, 0})
	y.Add(2, []int32{5, 0, 0, 6})
	for i := range 20 {
		y.Add(uint64(10+i), []int32{int32(20 + i), int32(40 + i), 0, 0})
	}
	if s := y.Score([]int32{5, 6}); s[0].ID != 1 || !(s[0].Score > s[1].Score) {
		t.Errorf("bigram scores %+v", s[:2])
	}
}

func TestNewBM25IndexInvalid(t *testing.T) {
	for _, o := range []BM25Options{
		{K1: -1, B: 0.5},
		{K1: math.Inf(1), B: 0.5},
		{K1: 1, B: 1.5},
		{K1: 1, B: math.NaN()},
		{K1: 1, B: 0.5, Weights: [BM25MaxNgram]float64{1, -1, 1}},
	} {
		if _, err := NewBM25Index(o); !errors.Is(err, ErrInvalidHotSet) {
			t.Errorf("NewBM25Index(%+v): err = %v", o, err)
		}
	}
	if _, err := NewBM25Index(BM25Options{}); err != nil {
		t.Errorf("zero options (k1 0, b 0, weights 0): %v", err)
	}
}

// benchIndex holds 200k tokens: 3125 blocks of 64 tokens.
func benchIndex(b *testing.B, vocab int) (*BM25Index, []int32) {
	r := rand.New(rand.NewSource(1))
	x := newTestIndex(b)
	for i, blk := range randomBlocks(r, 3125, 64, vocab) {
		x.Add(uint64(i), blk)
	}
	return x, randomTokens(r, 200, vocab)
}

// BenchmarkScore200k scores a 200-token query against 200k tokens in 3125
// blocks of 64, vocabulary 512 (long postings: the hard case).
func BenchmarkScore200k(b *testing.B) {
	x, q := benchIndex(b, 512)
	b.ReportAllocs()
	for b.Loop() {
		x.Score(q)
	}
}

// BenchmarkScore200kVocab32k is BenchmarkScore200k with a 32k vocabulary.
func BenchmarkScore200kVocab32k(b *testing.B) {
	x, q := benchIndex(b, 32000)
	b.ReportAllocs()
	for b.Loop() {
		x.Score(q)
	}
}

// BenchmarkAddBlock adds (replacing) one 64-token block to a 200k-token
// index.
func BenchmarkAddBlock(b *testing.B) {
	x, _ := benchIndex(b, 512)
	r := rand.New(rand.NewSource(2))
	blocks := randomBlocks(r, 64, 64, 512)
	i := 0
	for b.Loop() {
		x.Add(uint64(i%3125), blocks[i%64])
		i++
	}
}
