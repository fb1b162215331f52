package sidecar_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/ctxd/ctxd/engine/enginefake"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar"
)

// A dense snapshot restored by a restarted daemon (a new engine) puts the
// same KV back, byte for byte, and the session continues alike; a second
// snapshot shares the unchanged block; a new session whose manifest starts
// like the snapshot resumes from it.
func TestFakeSnapshotRestoreDense(t *testing.T) {
	d := startFake(t, sidecar.Config{ContextTokens: 2048}, enginefake.Options{TrainedContext: 4096})
	m := manifest(seg("a", pb.SegmentKind_SEGMENT_KIND_REPO_MAP, ids(1, 1100, 0, 250)), seg("b", pb.SegmentKind_SEGMENT_KIND_REPO_MAP, ids(2, 150, 0, 250)))
	id := d.open("saved")
	d.mustEnsure(id, m)
	snap := d.snapshot(id, "dense-a")
	if snap.GetTokens() != 1251 || snap.GetBlocks() != 2 || snap.GetNewBlocks() != 2 {
		t.Fatalf("snapshot %+v: want 1251 tokens in 2 new blocks", snap)
	}
	saved := d.resident().State
	before := d.greedy(id, 12)
	if again := d.snapshot(id, "dense-b"); again.GetNewBlocks() > 1 {
		t.Fatalf("second snapshot %+v: the unchanged first block must be shared", again)
	}

	d = d.restart()
	id2 := d.open("restored")
	rep, err := d.restore(id2, "dense-a")
	if err != nil {
		t.Fatal(err)
	}
	if rep.GetTokens() != 1251 || rep.GetRestoredBlocks()+rep.GetRecomputedBlocks() < 2 || rep.GetChoice() == "" {
		t.Fatalf("restore report %v", rep)
	}
	if !bytes.Equal(d.resident().State, saved) {
		t.Fatal("restored KV differs from the saved session's")
	}
	if after := d.greedy(id2, 12); !slices.Equal(after, before) {
		t.Fatalf("restored continues %v, saved %v", after, before)
	}
	if ex := d.explain(id2); ex.GetRestore().GetSnapshot() != "dense-a" || ex.GetResidentTokens() != 1251+12 {
		t.Fatalf("explain after restore: %v, resident %d", ex.GetRestore(), ex.GetResidentTokens())
	}
	// Cross-session resume stops at the snapshot's own tokens.
	longer := manifest(append(slices.Clone(m.Segments), seg("c", pb.SegmentKind_SEGMENT_KIND_REPO_MAP, ids(3, 40, 0, 250)))...)
	_, pr := d.openWith("resumer", longer)
	if pr.GetResumedSnapshot() == "" || pr.GetResumedTokens() < 1251 || pr.GetPrefilledTokens() != 40 {
		t.Fatalf("cross-session resume: %+v (want 1251 tokens resumed, 40 prefilled)", pr)
	}
}

// A hot-set snapshot (blocks hot in the engine and parked in the arena)
// restored after a restart holds the same engine KV byte for byte and
// continues alike, also through a turn that retrieves parked blocks (read
// back from the snapshot's extents); a dense daemon refuses it with a
// typed error.
func TestFakeSnapshotRestoreHotSet(t *testing.T) {
	cfg := hotConfig()
	cfg.NoCold = false
	d := startFake(t, cfg, enginefake.Options{})
	hay := ids(5, 3000, 0, 250)
	id := d.open("hot")
	d.mustEnsure(id, manifest(seg("hay", pb.SegmentKind_SEGMENT_KIND_TERMINAL, hay)))
	d.mustSuffix(id, seg("q", pb.SegmentKind_SEGMENT_KIND_USER_TURN, hay[100:108]))
	if snap := d.snapshot(id, "hot-a"); snap.GetTokens() != 3009 {
		t.Fatalf("snapshot of %d tokens, want 3009", snap.GetTokens())
	}
	saved := d.resident().State
	savedEx := d.explain(id)
	// The next turn asks for tokens parked far back.
	turn := seg("q2", pb.SegmentKind_SEGMENT_KIND_USER_TURN, hay[1500:1512])
	d.mustSuffix(id, turn)
	if ex := d.explain(id); ex.GetRetrievedTokens() == 0 {
		t.Fatalf("the second turn retrieved nothing: %v", ex.GetLastRetrieval())
	}
	before := d.greedy(id, 16)

	d = d.restart()
	id2 := d.open("restored")
	rep, err := d.restore(id2, "hot-a")
	if err != nil {
		t.Fatal(err)
	}
	stream := append(withBOS(hay), hay[100:108]...)
	ex := checkHotLayout(t, d, id2, stream)
	if !bytes.Equal(d.resident().State, saved) {
		t.Fatal("restored hot set differs from the saved session's engine KV")
	}
	if ex.GetParkedBlocks() != savedEx.GetParkedBlocks() || ex.GetHotTokens() != savedEx.GetHotTokens() || rep.GetRestoredBlocks() == 0 {
		t.Fatalf("restored: parked blocks %d (saved %d), hot %d (saved %d), report %v",
			ex.GetParkedBlocks(), savedEx.GetParkedBlocks(), ex.GetHotTokens(), savedEx.GetHotTokens(), rep)
	}
	d.mustSuffix(id2, turn)
	if after := d.greedy(id2, 16); !slices.Equal(after, before) {
		t.Fatalf("restored continues %v, saved %v", after, before)
	}
	// A dense daemon on the same data refuses the hot-set snapshot.
	d.stop()
	dense := d.cfg
	dense.HotTokens, dense.ContextTokens = 0, 256
	d = startFake(t, dense, enginefake.Options{})
	if _, err := d.restore(d.open("dense"), "hot-a"); !errors.Is(err, protocol.ErrIncompatible) {
		t.Fatalf("restoring a hot-set snapshot on a dense daemon: %v, want ErrIncompatible", err)
	}
}

// A snapshot read back with bytes the engine cannot take (here: every
// range insert fails) fails the restore with a typed error and leaves the
// session usable.
func TestFakeRestoreFailureLeavesSessionUsable(t *testing.T) {
	cfg := hotConfig()
	cfg.NoCold = false
	d := startFake(t, cfg, enginefake.Options{})
	hay := ids(7, 1200, 0, 250)
	id := d.open("a")
	d.mustEnsure(id, manifest(seg("hay", pb.SegmentKind_SEGMENT_KIND_TERMINAL, hay)))
	d.snapshot(id, "s")
	d.stop()
	fail := true
	d = startFake(t, d.cfg, enginefake.Options{Faults: &enginefake.Faults{Insert: func(int) error {
		if fail {
			return errors.New("injected: insert refused")
		}
		return nil
	}}})
	id2 := d.open("b")
	if _, err := d.restore(id2, "s"); !errors.Is(err, protocol.ErrInternal) {
		t.Fatalf("restore with failing inserts: %v, want ErrInternal", err)
	}
	fail = false
	small := ids(8, 100, 0, 250)
	d.mustEnsure(id2, manifest(seg("small", pb.SegmentKind_SEGMENT_KIND_TERMINAL, small)))
	d.mustSuffix(id2)
	checkHotLayout(t, d, id2, withBOS(small))
	d.greedy(id2, 4)
}
