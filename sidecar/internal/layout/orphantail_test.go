package layout

import (
	"context"
	"testing"

	"github.com/ctxd/ctxd/policy"
)

// closeWithTail syncs a hot set to sys+tools+conv (conv ending in the open
// tail, not block-aligned) and closes it while resident: its blocks and
// its open tail stay in the arena as an orphan tape.
func closeWithTail(t *testing.T, x *testHotSet, sys, tools, conv []int32) {
	t.Helper()
	x.h.env.Reuse = func() ReuseSettings { // no recompute budget
		return ReuseSettings{Mode: policy.ReuseAuto, Cost: policy.PrefillCost{BaseSeconds: 1e-3}, LatencySeconds: 1e-9}
	}
	if _, err := x.h.Sync(context.Background(), agentPrompt("k", sys, tools, conv), false, true, false); err != nil {
		t.Fatal(err)
	}
	x.h.Release(true, true)
	x.ectx.Clear()
}

// A closed hot set's open tail (the end of its conversation, under one
// block) is parked beside its orphan tape and lent with it: a prompt
// whose system prompt changed copies the tools and the whole
// conversation, the tail's tokens included; only the system prompt is
// prefilled. The tape's own tokens (what adoption matches as a prefix)
// stay its blocks'.
func TestOrphanTailLends(t *testing.T) {
	ctx := context.Background()
	x := newTestHotSet(t, 32<<20)
	sys, tools, conv := randomTokens(1, 68), randomTokens(2, 512), randomTokens(3, 100) // 680: 4 sinks, 10 blocks, a 36-token tail
	closeWithTail(t, x, sys, tools, conv)
	orphans := x.h.env.Tiers.Orphans()
	if len(orphans) != 1 || orphans[0].Tail == nil || len(orphans[0].Tail.Tokens) != 36 || len(orphans[0].Tokens) != 644 || len(orphans[0].Spans) != 3 {
		t.Fatalf("orphan tapes %+v: want one of 644 tokens with a 36-token tail and 3 spans", orphans)
	}
	tape := NewTape()
	h2 := NewHotSet(x.h.env, &tape, 2).(*hotSet)
	target := agentPrompt("k", randomTokens(4, 68), tools, conv)
	target.Donors = OrphanDonors(x.h.env.Tiers, "k", x.h.env)
	r, err := h2.Sync(ctx, target, false, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if r.Approximate != 612 || r.Prefilled != 68 {
		t.Fatalf("%+v: want the tools and the conversation (612 tokens, the tail's 36 included) copied, the system prompt (68) prefilled", r)
	}
	if err := Check(h2, x.ectx.Used()); err != nil {
		t.Fatal(err)
	}
	if o := x.h.env.Tiers.Orphans(); len(o) != 1 || o[0].Tail == nil {
		t.Fatal("the orphan tape or its tail changed while lending")
	}
	if _, err := x.h.env.Tiers.ReadParked(orphans[0].Tail.ID, nil); err != nil {
		t.Fatalf("the tail is unreadable after lending: %v", err)
	}
}

// A session adopting the orphan tape past an early change keeps the
// segments of its tail too: the tail comes back as the open tail and the
// sync moves it with the rest; its record is freed. Adopted by a prompt
// that stops before the tail, the tail is freed and nothing of it kept.
func TestOrphanTailAdopted(t *testing.T) {
	ctx := context.Background()
	x := newTestHotSet(t, 32<<20)
	sys, tools, conv := randomTokens(1, 132), randomTokens(2, 512), randomTokens(3, 100) // 744: 4 sinks, 11 blocks, a 36-token tail
	closeWithTail(t, x, sys, tools, conv)
	o := x.h.env.Tiers.Orphans()
	if len(o) != 1 || o[0].Tail == nil {
		t.Fatalf("orphan tapes %+v: want one with a tail", o)
	}
	tail := o[0].Tail.ID
	tape := NewTape()
	h2 := NewHotSet(x.h.env, &tape, 2).(*hotSet)
	sys2 := append([]int32(nil), sys...)
	for i := 68; i < 72; i++ {
		sys2[i]++ // the date, at a block boundary
	}
	target := agentPrompt("k", sys2, tools, conv)
	n, _, err := h2.AdoptOrphan(0, len(target.Tokens))
	if err != nil || n != len(target.Tokens) {
		t.Fatalf("adopted %d tokens (%v), want %d: the blocks and the tail", n, err, len(target.Tokens))
	}
	if err := Check(h2, x.ectx.Used()); err != nil {
		t.Fatal(err)
	}
	if _, err := x.h.env.Tiers.ReadParked(tail, nil); err == nil {
		t.Fatal("the tail's record is still in the arena after the adoption took it")
	}
	r, err := h2.Sync(ctx, target, false, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if r.Prefilled != 4 || r.Approximate != 60+612 {
		t.Fatalf("%+v: want the changed date (4) prefilled, the system prompt's rest (60), the tools and conversation (612, the tail's 36 included) moved", r)
	}
	if err := Check(h2, x.ectx.Used()); err != nil {
		t.Fatal(err)
	}
}
