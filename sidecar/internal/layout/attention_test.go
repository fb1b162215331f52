package layout

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
)

// A hot set asked to rank with both scorers on an engine without the
// attention contracts (the fake engine) keeps no summaries, retrieves
// with the lexical ranking alone, says so in its diagnostics and explain
// lists only the lexical scorer.
func TestAttentionWithoutTheContractsFallsBackToLexical(t *testing.T) {
	x := newTestHotSet(t, 64<<20)
	x.h.env.Hot.Scorers = policy.ScorerBoth
	hay := randomTokens(3, 3000)
	if _, err := x.h.Sync(context.Background(), prompt(hay, nil), false, true, false); err != nil {
		t.Fatal(err)
	}
	ask := append([]engine.Token(nil), hay[1000:1032]...)
	if _, err := x.h.Sync(context.Background(), prompt(hay, ask), true, false, true); err != nil {
		t.Fatal(err)
	}
	x.check(t)
	rep := x.residency()
	if x.h.attn != nil || !slices.ContainsFunc(rep.Diagnostics, func(d string) bool { return strings.Contains(d, "attention scorer off") }) {
		t.Fatalf("summaries %v; diagnostics %q", x.h.attn, rep.Diagnostics)
	}
	lr := rep.LastRetrieval
	if lr == nil || lr.Scorers != "both" || len(lr.Scorer) != 1 || lr.Scorer[0].Name != "lexical" || len(lr.Scorer[0].Top) == 0 {
		t.Fatalf("last retrieval %v", lr)
	}
	// The asked tokens' block came back.
	b := x.h.find(lr.Scorer[0].Top[0].BlockId)
	if b == nil || b.vstart > 1001 || b.vstart+b.n < 1032-64 || !b.res.inEngine() {
		t.Fatalf("lexical first candidate %+v", lr.Scorer[0].Top[0])
	}
}
