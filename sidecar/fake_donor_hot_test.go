package sidecar_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/ctxd/ctxd/engine/enginefake"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// Hot-set donors, token by token: a hot set's blocks decoded at their tape
// positions are copied to the same positions as exact reuse (byte for byte
// a cold prefill's KV), a donor's open tail (in its parked engine state
// only) is copied too, and blocks only partly inside a segment give the
// part inside.

// A new hot-set session whose prompt (shorter than the hot set) equals a
// live hot-set session's copies it exactly: its sealed blocks from the
// arena and its open tail from its parked state, at the same positions;
// the engine then holds byte for byte what a cold prefill gives.
func TestFakeDonorHotExactPrefix(t *testing.T) {
	cfg := hotConfig()
	cfg.ReuseLatency = time.Nanosecond
	d := startFake(t, cfg, enginefake.Options{})
	sys, tools := ids(1, 100, 0, 250), ids(2, 100, 0, 250) // 201 tokens with BOS: blocks to 196, a 5-token tail
	m := manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools))
	a := d.open("a")
	d.mustEnsure(a, m)
	d.mustSuffix(a)
	d.greedy(a, 3)

	cold := d.open("cold")
	if r := ensureExact(d, cold, m); r.GetReusedTokens() != 0 || r.GetPrefilledTokens() != 201 {
		t.Fatalf("exact request %+v: want a cold prefill, nothing copied", r)
	}
	coldState := d.resident().State

	b := d.open("b")
	r := d.mustEnsure(b, m)
	if r.GetReusedTokens() != 201 || r.GetApproximateTokens() != 0 || r.GetPrefilledTokens() != 0 {
		t.Fatalf("same prompt in a new hot-set session %+v: want all 201 tokens copied exactly", r)
	}
	if r.GetResumedSnapshot() != "" {
		t.Fatalf("resumed from %q, not copied from a live session", r.GetResumedSnapshot())
	}
	if !bytes.Equal(d.resident().State, coldState) {
		t.Fatal("a prefix copied from a hot-set session differs from a cold prefill")
	}
	checkHotLayout(t, d, b, withBOS(sys, tools))
}

// A sub-agent's segments that lie in a hot-set donor's open tail, or only
// partly in its sealed blocks, are copied (approximately, moved): only the
// sub-agent's own system prompt is prefilled.
func TestFakeDonorHotPartialBlocksAndTail(t *testing.T) {
	cfg := hotConfig()
	cfg.ReuseLatency = time.Nanosecond
	d := startFake(t, cfg, enginefake.Options{})
	sys, tools, short := ids(1, 37, 0, 250), ids(2, 700, 0, 250), ids(3, 20, 0, 250)
	main := d.open("main")
	// 758 tokens with BOS: the short segment [738,758) lies in the open
	// tail (blocks seal at 4+64k: the last at 708), the tools from 38 on
	// start and end inside blocks.
	d.mustEnsure(main, manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools), seg("short", pb.SegmentKind_SEGMENT_KIND_TOOLS, short)))
	d.mustSuffix(main)
	gen := d.greedy(main, 2)

	sys2 := ids(9, 50, 0, 250)
	sub := d.open("sub")
	r := d.mustEnsure(sub, manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys2), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools), seg("short", pb.SegmentKind_SEGMENT_KIND_TOOLS, short)))
	t.Logf("sub-agent: %+v", r)
	if r.GetPromptTokens() != 771 || r.GetPrefilledTokens() != 50 || r.GetApproximateTokens() != 720 {
		t.Fatalf("sub-agent %+v: want the 720 tool tokens copied (the tail's and the partial blocks' too), its 50-token system prompt prefilled", r)
	}
	checkHotLayout(t, d, sub, withBOS(sys2, tools, short))
	d.mustSuffix(sub)
	d.greedy(sub, 2)
	more := d.greedy(main, 1)
	checkHotLayout(t, d, main, slices.Concat(withBOS(sys, tools, short), gen, more))
}

// A hot-set donor's exact prefix on a prompt longer than the hot set: the
// new session takes the donor's blocks decoded in place, then prefills on
// to where a cold prefill's stream stands before evicting
// (policy.HotExactPrefix), so after all its evictions it holds byte for
// byte what a cold prefill of its prompt gives (in a daemon of its own);
// without that stop it would evict at once (too little room left for a
// chunk), where a cold prefill decodes on.
func TestFakeDonorHotExactPrefixThenEvictions(t *testing.T) {
	cfg := hotConfig()
	cfg.ReuseLatency = time.Hour // nothing approximate: what is not copied exactly is prefilled
	sys := ids(1, 200, 0, 250)   // with BOS 201: past 196 (the donor's last block in place), too little room for a chunk
	toolsA, toolsB := ids(2, 600, 0, 250), ids(3, 600, 0, 250)
	mB := manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, toolsB))

	ref := startFake(t, cfg, enginefake.Options{})
	cold := ref.open("cold")
	ref.mustEnsure(cold, mB)
	coldState := ref.resident().State

	d := startFake(t, cfg, enginefake.Options{})
	a := d.open("a")
	d.mustEnsure(a, manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, toolsA)))
	d.mustSuffix(a)
	d.greedy(a, 2)
	b := d.open("b")
	r := d.mustEnsure(b, mB)
	t.Logf("b: %+v", r)
	if r.GetReusedTokens() == 0 || r.GetApproximateTokens() != 0 || r.GetReusedTokens()+r.GetPrefilledTokens() != 801 {
		t.Fatalf("b %+v: want the donor's prefix copied exactly, the rest prefilled", r)
	}
	if !bytes.Equal(d.resident().State, coldState) {
		t.Fatal("a session that took a hot-set donor's exact prefix holds other KV than a cold prefill of its prompt")
	}
}
