package main

import (
	"math/rand"
	"slices"
	"testing"
)

// fakeText is a token stream with text-like repetition: words of 2–6
// tokens drawn from a small lexicon.
func fakeText(rng *rand.Rand, n, lexicon int, base int32) []int32 {
	words := make([][]int32, lexicon)
	for i := range words {
		for range 2 + rng.Intn(5) {
			words[i] = append(words[i], base+int32(rng.Intn(200)))
		}
	}
	var out []int32
	for len(out) < n {
		out = append(out, words[rng.Intn(lexicon)]...)
	}
	return out[:n]
}

func TestNeedleTrials(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	filler := fakeText(rng, 20000, 300, 3)
	source := fakeText(rng, 6000, 300, 150) // overlaps the filler's tokens
	srcs := newNeedleSources(filler, source, 512)
	for _, sh := range []trialShape{
		{distance: 4096, needles: 1, queryTurn: 64, window: 256, block: 64, sinks: 4, kind: "text"},
		{distance: 4096, needles: 4, queryTurn: 64, window: 256, block: 64, sinks: 4, kind: "random"},
		{distance: 4096, needles: 4, queryTurn: 64, window: 256, block: 64, sinks: 4, kind: "both"},
		{needles: 2, queryTurn: 64, window: 256, block: 64, sinks: 4, kind: "both", baseline: true},
		{needles: 1, window: 256, block: 64, sinks: 4, kind: "random", baseline: true},
	} {
		for range 20 {
			tr, err := srcs.draw(rng, sh)
			if err != nil {
				t.Fatalf("%+v: %v", sh, err)
			}
			wantAsks := 1
			if sh.kind == "both" {
				wantAsks = sh.needles
			}
			if len(tr.asks) != wantAsks || len(tr.needles) != sh.needles {
				t.Fatalf("%+v: %d asks, %d needles", sh, len(tr.asks), len(tr.needles))
			}
			for _, a := range tr.asks {
				ndl := tr.needles[a.needle]
				prefix := ndl[:askTokens]
				lo, hi := tr.span(a)
				switch {
				case len(a.query) != sh.queryLen() || !slices.Equal(a.query[len(a.query)-askTokens:], prefix):
					t.Fatalf("%+v: query %v does not end with %v", sh, a.query, prefix)
				case countSeq(tr.hay, prefix) != 1 || countSeq(a.query[:len(a.query)-askTokens], prefix) != 0:
					t.Fatalf("%+v: the asked prefix is not unique", sh)
				case !slices.Equal(tr.hay[lo-1:hi-1], ndl):
					t.Fatalf("%+v: needle not at its span", sh)
				case a.text != sh.isText(a.needle):
					t.Fatalf("%+v: needle kind", sh)
				}
				if a.text && countSeq(source, ndl) == 0 {
					t.Fatalf("%+v: a text needle is not a span of the source", sh)
				}
				text := a.query[:len(a.query)-askTokens]
				for i := 0; i+queryDistinct <= len(text); i++ {
					if _, in := srcs.hay8[gramKey(text, i, queryDistinct)]; in {
						t.Fatalf("%+v: the query turn shares %d tokens with the haystack", sh, queryDistinct)
					}
				}
				if sh.baseline {
					if total := 1 + len(tr.hay) + len(a.query) + needleTokens - askTokens; total > sh.window {
						t.Fatalf("%+v: baseline of %d tokens exceeds the window", sh, total)
					}
				} else if b0, b1 := (lo-sh.sinks)/sh.block, (hi-1-sh.sinks)/sh.block; b0 != b1 {
					t.Fatalf("%+v: needle [%d,%d) straddles blocks", sh, lo, hi)
				}
			}
		}
	}
	if _, err := srcs.draw(rng, trialShape{needles: 8, queryTurn: 64, window: 256, kind: "text", baseline: true}); err == nil {
		t.Error("8 needles and a 64-token turn fit a 256-token window?")
	}
}

// The baseline diagnostics: --baseline-alone leaves the needles not asked
// out of the baseline's haystack, --baseline-tokens sets its length.
func TestNeedleBaselineDiagnostics(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	srcs := newNeedleSources(fakeText(rng, 20000, 300, 3), fakeText(rng, 6000, 300, 150), 512)
	alone := trialShape{needles: 4, queryTurn: 64, window: 256, block: 64, sinks: 4, kind: "text", baseline: true, aloneBaseline: true}
	for range 10 {
		tr, err := srcs.draw(rng, alone)
		if err != nil {
			t.Fatal(err)
		}
		for j, o := range tr.offsets {
			placed := slices.Equal(tr.hay[o:o+needleTokens], tr.needles[j])
			if asked := j == tr.asks[0].needle; placed != asked {
				t.Fatalf("needle %d (asked %v) placed %v", j, asked, placed)
			}
		}
	}
	for _, tc := range []struct{ tokens, want int }{{0, 130}, {170, 170}, {1000, 170}, {10, leadTokens + needleTokens + 8}} {
		sh := trialShape{needles: 1, queryTurn: 64, window: 256, block: 64, sinks: 4, kind: "text", baseline: true, baselineTokens: tc.tokens}
		if n, _, err := sh.layout(); err != nil || n != tc.want {
			t.Errorf("--baseline-tokens %d: %d tokens, %v; want %d", tc.tokens, n, err, tc.want)
		}
	}
}

// --far-alone places only the asked needle in a far haystack, at the
// offset the draw gives it.
func TestNeedleFarAlone(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	srcs := newNeedleSources(fakeText(rng, 20000, 300, 3), fakeText(rng, 6000, 300, 150), 512)
	sh := trialShape{distance: 4096, needles: 4, queryTurn: 64, window: 256, block: 64, sinks: 4, kind: "text", aloneFar: true}
	for range 10 {
		tr, err := srcs.draw(rng, sh)
		if err != nil {
			t.Fatal(err)
		}
		for j, o := range tr.offsets {
			placed := slices.Equal(tr.hay[o:o+needleTokens], tr.needles[j])
			if asked := j == tr.asks[0].needle; placed != asked {
				t.Fatalf("needle %d (asked %v) placed %v", j, asked, placed)
			}
		}
	}
}
