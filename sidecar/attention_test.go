package sidecar

import (
	"context"
	"errors"
	"math/rand"
	"testing"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
)

// noAttention is an engine context without the attention contracts.
type noAttention struct{ engine.Context }

func TestCheckScorersNeedsEngineSupport(t *testing.T) {
	for _, tc := range []struct {
		s    policy.ScorerSet
		ectx engine.Context
		ok   bool
	}{
		{policy.ScorerLexical, noAttention{}, true},
		{policy.ScorerNone, nil, true},
		{policy.ScorerAttention, noAttention{}, false},
		{policy.ScorerBoth, noAttention{}, false},
		{policy.ScorerBoth, nil, false},
	} {
		err := checkScorers(tc.s, tc.ectx)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrScorerUnavailable) {
			t.Errorf("%v: %v", tc.s, err)
		}
	}
}

// TestAttentionScorerRanksParkedBlocks: on the real needle model, with the
// attention scorer, every parked block gets a key summary (at seal, or
// lazily when attention is switched on later), a turn's queries are
// probed and removed again (the engine holds exactly the hot set
// afterwards), explain reports the attention ranking with its summary
// memory and time and the needle's block first, and with both scorers the
// fused ranking that admits it.
func TestAttentionScorerRanksParkedBlocks(t *testing.T) {
	ts := needleServer(t, Config{Threads: 1})
	if !attentionEngine(ts.srv.slot.ectx) {
		if err := ts.srv.SetScorers(context.Background(), policy.ScorerAttention); !errors.Is(err, ErrScorerUnavailable) {
			t.Fatalf("an engine without the attention contracts: SetScorers(attention) = %v, want ErrScorerUnavailable", err)
		}
		t.Skip("engine/llama implements neither engine.QueryCapturer nor engine.KeyReader yet")
	}
	c := dial(t, ts)
	ctx := context.Background()
	rng := rand.New(rand.NewSource(7))
	f := ts.srv.slot.facts
	shape := policy.AttentionShape{Layers: f.Layers, Heads: f.Heads, KVHeads: f.KVHeads, HeadDim: f.HeadDim}
	plan, err := policy.PlanKeySummary(shape, ts.srv.slot.hot.Block, ts.srv.slot.kvType(), policy.DefaultKeySummaryFraction)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []policy.ScorerSet{policy.ScorerBoth, policy.ScorerAttention} {
		// Both: summaries at seal. Attention: sealed with the lexical
		// scorer alone, summaries come lazily at the turn.
		seal := mode
		if mode == policy.ScorerAttention {
			seal = policy.ScorerLexical
		}
		if err := ts.srv.SetScorers(ctx, seal); err != nil {
			t.Fatal(err)
		}
		hay, needle := haystack(rng, 3000)
		s := openSession(t, c)
		if _, err := s.EnsurePrefix(ctx, client.Manifest{Segments: []client.Segment{{ID: "hay", Kind: client.KindTerminal, Tokens: hay, Stable: true}}}); err != nil {
			t.Fatal(err)
		}
		if err := ts.srv.SetScorers(ctx, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PrefillSuffix(ctx, client.Segment{ID: "query", Kind: client.KindUserTurn, Tokens: needle[:4]}); err != nil {
			t.Fatal(err)
		}
		checkHot(t, ts.srv)
		ex, err := s.Explain(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ex.ResidentTokens != len(hay)+1+4 {
			t.Fatalf("%v: resident %d tokens, want %d (the probe must leave nothing)", mode, ex.ResidentTokens, len(hay)+1+4)
		}
		lr := ex.LastRetrieval
		if lr == nil || lr.Scorers != mode.String() {
			t.Fatalf("%v: last retrieval %+v", mode, lr)
		}
		runs := map[string]client.ScorerReport{}
		for _, sr := range lr.Scorer {
			runs[sr.Name] = sr
		}
		att, ok := runs["attention"]
		blocks := (len(hay) + 1 - 4) / 64 // sealed blocks after the sinks' block
		if !ok || att.Blocks < blocks || att.SummaryBytes != int64(att.Blocks)*plan.Bytes || att.Scoring <= 0 || len(att.Top) == 0 {
			t.Fatalf("%v: attention report %+v (want ≥ %d blocks of %d summary bytes)", mode, att, blocks, plan.Bytes)
		}
		t.Logf("%v: attention over %d blocks: %v (probe and scoring), summaries %d B; first candidate at token %d",
			mode, att.Blocks, att.Scoring, att.SummaryBytes, att.Top[0].FirstToken)
		// The needle sits at stream positions 41..64, in block [4, 68):
		// the model's own queries find it among 47 blocks of random ids.
		if top := att.Top[0]; top.FirstToken != 4 || mode == policy.ScorerAttention && !top.Admitted {
			t.Fatalf("%v: attention candidates %+v", mode, att.Top)
		}
		if mode == policy.ScorerBoth {
			fused, ok := runs["fused"]
			if _, lex := runs["lexical"]; !ok || !lex || len(fused.Top) == 0 {
				t.Fatalf("both: runs %v", lr.Scorer)
			}
			if top := fused.Top[0]; top.FirstToken != 4 || !top.Admitted {
				t.Fatalf("both: fused candidates %+v", fused.Top)
			}
		}
		s.Close(ctx)
	}
}
