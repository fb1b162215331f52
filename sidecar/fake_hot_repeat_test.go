package sidecar_test

import (
	"slices"
	"testing"

	"github.com/ctxd/ctxd/engine/enginefake"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// A repeated request on a hot-set session (the HTTP door's sequence:
// EnsurePrefix of the stable segments, PrefillSuffix with the volatile
// last message, Decode) finds the hot set laid out as the first time,
// token for token at every engine position, and answers the same, though
// the first answer's long decode sealed blocks and evicted others.
func TestFakeHotRepeatedTurnRestoresItsLayout(t *testing.T) {
	d := startFake(t, hotConfig(), enginefake.Options{})
	sys, q1, q2 := ids(41, 2000, 0, 250), ids(42, 30, 0, 250), ids(43, 60, 0, 250)
	id := d.open("repeat")
	stable := manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("u1", pb.SegmentKind_SEGMENT_KIND_USER_TURN, q1))
	last := &pb.Segment{Id: "u2", Kind: pb.SegmentKind_SEGMENT_KIND_USER_TURN, Tokens: q2}
	turn := func() (enginefake.Resident, []int32) {
		d.mustEnsure(id, stable)
		d.mustSuffix(id, last)
		at := d.resident()
		before := d.explain(id).GetEvictions()
		out := d.greedy(id, 100) // past the hot budget: blocks seal and others leave
		if d.explain(id).GetEvictions() == before {
			t.Fatalf("the answer (%d tokens) evicted nothing", len(out))
		}
		return at, out
	}
	firstAt, first := turn()
	for i := 0; i < 2; i++ {
		againAt, again := turn()
		if !slices.Equal(againAt.Positions, firstAt.Positions) || !slices.Equal(againAt.Tokens, firstAt.Tokens) {
			t.Fatalf("ask %d: the engine at the turn's start holds %d tokens, the first time %d, or at other positions", i+2, len(againAt.Tokens), len(firstAt.Tokens))
		}
		if !slices.Equal(again, first) {
			t.Fatalf("ask %d answered %v\nthe first time %v", i+2, again, first)
		}
	}
}
