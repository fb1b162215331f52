package layout

import (
	"context"
	"testing"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
)

// agentPrompt is sys, tools and conv as three stable segments.
func agentPrompt(compat string, sys, tools, conv []engine.Token) Prompt {
	var p Prompt
	for _, s := range []struct {
		id   string
		kind policy.SegmentKind
		toks []engine.Token
	}{{"sys", policy.KindSystem, sys}, {"tools", policy.KindTools, tools}, {"conv", policy.KindUserTurn, conv}} {
		p.Spans = append(p.Spans, Span{Seg: policy.Segment{ID: s.id, Kind: s.kind, Stable: true}, Start: len(p.Tokens), End: len(p.Tokens) + len(s.toks)})
		p.Tokens = append(p.Tokens, s.toks...)
	}
	p.Compat = compat
	return p
}

// A closed hot set's orphan tape carries its spans and lends its
// unchanged segments to another hot set whose system prompt changed: the
// blocks are copied from the arena (read-only: the orphan stays, its
// blocks readable), moved into place, approximate; a prompt under another
// compatibility key is offered nothing.
func TestOrphanDonorLendsSegments(t *testing.T) {
	ctx := context.Background()
	x := newTestHotSet(t, 32<<20)
	x.h.env.Reuse = func() ReuseSettings { // no recompute budget
		return ReuseSettings{Mode: policy.ReuseAuto, Cost: policy.PrefillCost{BaseSeconds: 1e-3}, LatencySeconds: 1e-9}
	}
	// Block-aligned: 4 sinks, then 64-token blocks.
	sys, tools, conv := randomTokens(1, 68), randomTokens(2, 512), randomTokens(3, 128)
	if _, err := x.h.Sync(ctx, agentPrompt("k", sys, tools, conv), false, true, false); err != nil {
		t.Fatal(err)
	}
	x.h.Release(true, true)
	x.ectx.Clear()
	orphans := x.h.env.Tiers.Orphans()
	if len(orphans) != 1 || len(orphans[0].Spans) != 3 || orphans[0].Compat != "k" {
		t.Fatalf("orphan tapes %+v: want one with its 3 spans under key k", orphans)
	}
	if d := OrphanDonors(x.h.env.Tiers, "other", x.h.env); len(d) != 0 {
		t.Fatalf("%d donors under another key", len(d))
	}

	tape := NewTape()
	h2 := NewHotSet(x.h.env, &tape, 2).(*hotSet)
	sys2 := randomTokens(4, 68)
	target := agentPrompt("k", sys2, tools, conv)
	target.Donors = OrphanDonors(x.h.env.Tiers, "k", x.h.env)
	r, err := h2.Sync(ctx, target, false, true, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
	if r.Approximate != 640 || r.Prefilled != 68 {
		t.Fatalf("%+v: want the tools and conversation (640 tokens) copied, the system prompt (68) prefilled", r)
	}
	if err := Check(h2, x.ectx.Used()); err != nil {
		t.Fatal(err)
	}
	if got := x.h.env.Tiers.Orphans(); len(got) != 1 || got[0] != orphans[0] {
		t.Fatal("the orphan tape changed while lending")
	}
	for _, m := range orphans[0].Blocks {
		if _, err := x.h.env.Tiers.ReadParked(m.ID, nil); err != nil {
			t.Fatalf("orphan block %d unreadable after lending: %v", m.ID, err)
		}
	}
}

// An orphan tape's block that a lent run covers only in part is copied
// and trimmed, not prefilled: the tools start inside a block in the
// orphan (after a 100-token system prompt) and in the new prompt (after
// 90 tokens), and only the new system prompt is prefilled.
func TestOrphanDonorLendsPartialBlocks(t *testing.T) {
	ctx := context.Background()
	x := newTestHotSet(t, 32<<20)
	x.h.env.Reuse = func() ReuseSettings { // no recompute budget; copying costs nothing
		return ReuseSettings{Mode: policy.ReuseAuto, Cost: policy.PrefillCost{BaseSeconds: 1e-3}, LatencySeconds: 1e-9}
	}
	sys, tools, conv := randomTokens(1, 100), randomTokens(2, 512), randomTokens(3, 96) // 708 tokens: 4 sinks and 11 blocks
	if _, err := x.h.Sync(ctx, agentPrompt("k", sys, tools, conv), false, true, false); err != nil {
		t.Fatal(err)
	}
	x.h.Release(true, true)
	x.ectx.Clear()
	tape := NewTape()
	h2 := NewHotSet(x.h.env, &tape, 2).(*hotSet)
	target := agentPrompt("k", randomTokens(4, 90), tools, conv)
	target.Donors = OrphanDonors(x.h.env.Tiers, "k", x.h.env)
	r, err := h2.Sync(ctx, target, false, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if r.Approximate != 608 || r.Prefilled != 90 {
		t.Fatalf("%+v: want the tools and conversation (608 tokens, the first block trimmed) copied, the system prompt (90) prefilled", r)
	}
	if err := Check(h2, x.ectx.Used()); err != nil {
		t.Fatal(err)
	}
}
