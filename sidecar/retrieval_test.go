package sidecar

import (
	"context"
	"math/rand"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/internal/trace"
)

// traceTokens is the message text of a trajectory in the needle model's
// tokens.
func traceTokens(t *testing.T, m *llama.Model, name string) []int32 {
	t.Helper()
	tr, err := trace.Load(filepath.Join(testmodel.Traces(t), name))
	if err != nil {
		t.Fatal(err)
	}
	var out []int32
	for _, msg := range tr.History {
		toks, err := m.Tokenize(msg.Content, false)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, toks...)
	}
	return out
}

func hasSeq(toks, seq []int32) bool {
	for i := 0; i+len(seq) <= len(toks); i++ {
		if slices.Equal(toks[i:i+len(seq)], seq) {
			return true
		}
	}
	return false
}

// TestTextNeedleComesBackFromTextHaystack: on the real needle model, a
// needle of trace text parked ~3,000 tokens back in a haystack of another
// trace's text is retrieved when a 64-token user turn of text ends with
// its first 4 tokens, and explain shows the lexical scorer's candidates
// with the needle's block first and admitted.
func TestTextNeedleComesBackFromTextHaystack(t *testing.T) {
	m, err := llama.Load(testmodel.Needle(t))
	if err != nil {
		t.Fatal(err)
	}
	filler := traceTokens(t, m, "marshmallow-1867-default.traj")
	source := traceTokens(t, m, "ctf-babyencryption.traj")
	m.Close()
	// One thread: llama.cpp's threads wait for each other by spinning,
	// which on a machine shared with other jobs costs far more than a
	// second thread gains on a model this small.
	ts := needleServer(t, Config{Threads: 1, Scorers: "lexical"})
	c := dial(t, ts)
	ctx := context.Background()
	rng := rand.New(rand.NewSource(11))
	const trials = 3
	sum := 0.0
	for k := 0; k < trials; k++ {
		// A needle whose first 4 tokens the haystack lacks, and a turn of
		// source text elsewhere that shares no 8 tokens with either.
		var needle, turn []int32
		for needle == nil || hasSeq(filler, needle[:4]) {
			at := rng.Intn(len(source) - 24)
			needle = source[at : at+24]
		}
		for turn == nil || hasSeq(turn[:60], needle[:4]) {
			at := rng.Intn(len(source) - 60)
			turn = append(append([]int32(nil), source[at:at+60]...), needle[:4]...)
			for i := 0; i+8 <= 60 && turn != nil; i += 4 {
				if hasSeq(filler, turn[i:i+8]) || hasSeq(needle, turn[i:i+8]) {
					turn = nil
				}
			}
		}
		off := rng.Intn(len(filler) - 3100)
		hay := append(append(append([]int32(nil), filler[off:off+40]...), needle...), filler[off+40:off+3040]...)
		s := openSession(t, c)
		if _, err := s.EnsurePrefix(ctx, client.Manifest{Segments: []client.Segment{{ID: "hay", Kind: client.KindTerminal, Tokens: hay, Stable: true}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PrefillSuffix(ctx, client.Segment{ID: "turn", Kind: client.KindUserTurn, Tokens: turn}); err != nil {
			t.Fatal(err)
		}
		checkHot(t, ts.srv)
		ex, err := s.Explain(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lr := ex.LastRetrieval
		if lr == nil || lr.Scorers != "lexical" || lr.QueryTokens != len(turn) || lr.BudgetTokens < 64 || len(lr.Scorer) != 1 {
			t.Fatalf("trial %d: last retrieval %v", k, lr)
		}
		top := lr.Scorer[0].Top
		// The needle sits at stream positions 41..64 (after BOS), inside
		// the block [4, 68).
		if len(top) == 0 || top[0].FirstToken != 4 || !top[0].Admitted || !(top[0].Score > 0) || top[0].Rank != 1 {
			t.Fatalf("trial %d: lexical candidates %v", k, top)
		}
		hit := false
		for _, b := range ex.Retrieved {
			hit = hit || b.FirstToken == 4
		}
		if !hit {
			t.Fatalf("trial %d: the needle's block is not hot (retrieved %v)", k, ex.Retrieved)
		}
		right := 0
		if _, err := s.Decode(ctx, client.DecodeOptions{MaxTokens: 20, Forced: needle[4:]}, func(tok client.Token) error {
			if tok.Predicted == tok.ID {
				right++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		sum += float64(right) / 20
		s.Close(ctx)
	}
	t.Logf("text needle in a text haystack, 64-token turn: accuracy %.3f over %d trials (the block came back every time)", sum/trials, trials)
	if sum == 0 {
		t.Fatal("the retrieved needle's tokens were never predicted")
	}
}
