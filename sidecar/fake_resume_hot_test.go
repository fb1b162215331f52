package sidecar_test

import (
	"slices"
	"testing"

	"github.com/ctxd/ctxd/engine/enginefake"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// The HTTP door's sequence on a hot-set session resumed from an automatic
// snapshot (EnsurePrefix of the whole conversation, PrefillSuffix, Decode)
// continues exactly as the snapshotted session answers the same request:
// in the same daemon (a closed session's snapshot) and after a restart
// (the open session's snapshot at shutdown, which holds its reply too).
//
// A hot set is path-dependent: the blocks evicted while a reply is
// generated stay evicted when the reply is cut away. A cut back to where
// the turn started restores the layout it had there (and a snapshot
// carries that mark), so the original answers a repeated request as it
// first did, and so does the session resumed from its snapshot, which
// holds the reply.
func TestFakeHotResumeContinuesAsTheOriginal(t *testing.T) {
	for _, restart := range []bool{false, true} {
		hotResumeContinues(t, restart)
	}
}

func hotResumeContinues(t *testing.T, restart bool) {
	cfg := hotConfig()
	cfg.NoCold = false
	d := startFake(t, cfg, enginefake.Options{})
	sys, q1, q2 := ids(31, 3000, 0, 250), ids(32, 12, 0, 250), ids(33, 10, 0, 250)
	turn1 := manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("u1", pb.SegmentKind_SEGMENT_KIND_USER_TURN, q1))
	turn2 := func(reply []int32) *pb.Manifest {
		return manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("u1", pb.SegmentKind_SEGMENT_KIND_USER_TURN, q1),
			seg("a1", pb.SegmentKind_SEGMENT_KIND_USER_TURN, reply), seg("u2", pb.SegmentKind_SEGMENT_KIND_USER_TURN, q2))
	}
	// The session that never closes: turn 2, then turn 2 asked again.
	a := d.open("a")
	d.mustEnsure(a, turn1)
	d.mustSuffix(a)
	reply := d.greedy(a, 8)
	d.mustEnsure(a, turn2(reply))
	d.mustSuffix(a)
	first := d.greedy(a, 16)
	d.mustEnsure(a, turn2(reply))
	d.mustSuffix(a)
	again := d.greedy(a, 16)
	if !slices.Equal(again, first) {
		t.Fatalf("restart %v: turn 2 asked again answered %v, first %v", restart, again, first)
	}

	// The same first turn in a session that closes (automatic snapshot),
	// then the second turn in a new one.
	b := d.open("b")
	d.mustEnsure(b, turn1)
	d.mustSuffix(b)
	if got := d.greedy(b, 8); !slices.Equal(got, reply) {
		t.Fatalf("the same first turn replied %v, then %v", reply, got)
	}
	d.closeSession(b)
	d.waitSnapshot("auto-b")
	want, from := first, "auto-b" // b's snapshot is a's state before turn 2
	if restart {
		d = d.restart()
		// a's snapshot at shutdown holds turn 2 and its answer: cut back
		// to turn 2, it answers as a did (both times).
		want, from = again, "auto-a"
	}
	c := d.open("c")
	pr := d.mustEnsure(c, turn2(reply))
	d.mustSuffix(c)
	got := d.greedy(c, 16)
	t.Logf("restart %v: resumed from %q: reused %d of %d, prefilled %d", restart, pr.GetResumedSnapshot(), pr.GetReusedTokens(), pr.GetPromptTokens(), pr.GetPrefilledTokens())
	if pr.GetResumedSnapshot() != from {
		t.Fatalf("restart %v: resumed from %q, want %q", restart, pr.GetResumedSnapshot(), from)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("restart %v: resumed session continues %v; the snapshotted session %v", restart, got, want)
	}
}
