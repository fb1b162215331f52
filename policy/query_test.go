package policy

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestTurnQuery(t *testing.T) {
	turn := []int32{10, 11, 12, 13, 14}
	newToks := []int32{13, 14}
	for _, tc := range []struct {
		name string
		in   TurnQueryInput
		want []int32
	}{
		{"the turn's own tokens, though some are already in the engine", TurnQueryInput{Turn: turn, New: newToks}, turn},
		{"no turn segment: the new tokens", TurnQueryInput{New: newToks}, newToks},
		{"capped: the newest tokens", TurnQueryInput{Turn: turn, New: newToks, MaxTokens: 3}, []int32{12, 13, 14}},
		{"cap above the turn", TurnQueryInput{Turn: turn, MaxTokens: 50}, turn},
		{"nothing", TurnQueryInput{}, nil},
	} {
		if got := TurnQuery(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("%s: TurnQuery = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestTurnRecentTokens(t *testing.T) {
	for _, tc := range []struct{ recent, newToks, want int }{
		{64, 4, 60},
		{64, 64, 0},
		{64, 4096, 0},
		{128, 0, 128},
		{0, 10, 0},
	} {
		if got := TurnRecentTokens(tc.recent, tc.newToks); got != tc.want {
			t.Errorf("TurnRecentTokens(%d, %d) = %d, want %d", tc.recent, tc.newToks, got, tc.want)
		}
	}
}

func TestParseScorerSet(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ScorerSet
		err  bool
	}{
		{"lexical", ScorerLexical, false},
		{" Attention ", ScorerAttention, false},
		{"both", ScorerBoth, false},
		{"none", ScorerNone, false},
		{"bm25", 0, true},
		{"", 0, true},
	} {
		got, err := ParseScorerSet(tc.in)
		if tc.err {
			if !errors.Is(err, ErrUnknownScorer) {
				t.Errorf("ParseScorerSet(%q): err = %v, want ErrUnknownScorer", tc.in, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseScorerSet(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, _ := ParseScorerSet(got.String()); back != got {
			t.Errorf("%v does not round-trip through String", got)
		}
	}
	if !ScorerBoth.Has(ScorerLexical) || !ScorerBoth.Has(ScorerAttention) || ScorerLexical.Has(ScorerAttention) || ScorerLexical.Has(ScorerNone) {
		t.Error("Has")
	}
}

// textLikeIndex is a haystack shaped like natural text under a small
// vocabulary: block 1 ("distractor") shares many of the query's ordinary
// words (each rare in the haystack), block 2 ("target") holds the 4 tokens
// the query ends with, 48 blocks of other words surround them.
func textLikeIndex(t *testing.T, opts BM25Options) (*BM25Index, []int32) {
	t.Helper()
	x, err := NewBM25Index(opts)
	if err != nil {
		t.Fatal(err)
	}
	words := []int32{100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115}
	cue := []int32{200, 201, 202, 203}
	var distractor []int32
	for i := 0; i+4 <= len(words); i += 4 {
		distractor = append(distractor, words[i:i+4]...)
		distractor = append(distractor, 7, 8)
	}
	x.Add(1, distractor)
	x.Add(2, append([]int32{9, 9, 9}, append(cue, 9, 9)...))
	for i := range 48 {
		x.Add(uint64(10+i), []int32{int32(300 + i), int32(400 + i), 7, 8, int32(500 + i)})
	}
	query := append(append([]int32(nil), words...), 7, 8)
	return x, append(query, cue...)
}

func TestBM25QueryWeighting(t *testing.T) {
	textbook := DefaultBM25Options()
	textbook.IDFPower, textbook.QueryHalfLife = 1, 0
	for _, tc := range []struct {
		name  string
		opts  BM25Options
		first uint64
	}{
		{"defaults: the turn's newest rare n-gram wins", DefaultBM25Options(), 2},
		{"textbook BM25: the turn's ordinary words drown it", textbook, 1},
	} {
		x, q := textLikeIndex(t, tc.opts)
		if s := x.Score(q); s[0].ID != tc.first {
			t.Errorf("%s: first %+v, then %+v; want block %d first", tc.name, s[0], s[1], tc.first)
		}
	}
	// The floor: a rare identifier early in a long turn still finds its
	// block, ahead of every block without it.
	x := newTestIndex(t)
	x.Add(1, []int32{50, 51, 52, 53})
	for i := range 30 {
		x.Add(uint64(10+i), []int32{int32(100 + i), 7, 8, 9})
	}
	q := append([]int32{50, 51, 52, 53}, make([]int32, 200)...)
	if s := x.Score(q); s[0].ID != 1 || !(s[0].Score > 0) {
		t.Errorf("identifier 200 tokens before the end: first %+v", s[0])
	}
	// A repeated term takes its newest occurrence's weight.
	y := newTestIndex(t)
	y.Add(1, []int32{60})
	y.Add(2, []int32{61})
	a := Scores(y.Score([]int32{60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 60}))
	b := Scores(y.Score([]int32{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 60}))
	if a[1] != b[1] {
		t.Errorf("repeated term scores %g, newest occurrence alone %g", a[1], b[1])
	}
}

func TestNewBM25IndexInvalidQueryWeighting(t *testing.T) {
	for _, mod := range []func(*BM25Options){
		func(o *BM25Options) { o.IDFPower = -1 },
		func(o *BM25Options) { o.IDFPower = math.Inf(1) },
		func(o *BM25Options) { o.QueryHalfLife = math.NaN() },
		func(o *BM25Options) { o.QueryHalfLife = -4 },
		func(o *BM25Options) { o.QueryFloor = 1.5 },
		func(o *BM25Options) { o.QueryFloor = math.NaN() },
	} {
		o := DefaultBM25Options()
		mod(&o)
		if _, err := NewBM25Index(o); !errors.Is(err, ErrInvalidHotSet) {
			t.Errorf("NewBM25Index(%+v): err = %v", o, err)
		}
	}
}
