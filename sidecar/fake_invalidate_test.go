package sidecar_test

import (
	"slices"
	"testing"

	"github.com/ctxd/ctxd/engine/enginefake"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar"
)

// invalidate_on_turn segments expire when a turn ends; invalidate_on_edit
// segments are cut when a file they name is reported edited. The engine
// then holds exactly the tape that is left.
func TestFakeInvalidationOnTurnAndOnEdit(t *testing.T) {
	d := startFake(t, sidecar.Config{ContextTokens: 1024, NoCold: true}, enginefake.Options{})
	sys, file, rules, term, ask := ids(1, 100, 0, 250), ids(2, 100, 0, 250), ids(3, 50, 0, 250), ids(4, 30, 0, 250), ids(5, 10, 0, 250)
	m := manifest(
		seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys),
		&pb.Segment{Id: "file", Kind: pb.SegmentKind_SEGMENT_KIND_REPO_MAP, Stable: true, InvalidateOnEdit: true, Paths: []string{"pkg/a.go"}, Tokens: file},
		seg("rules", pb.SegmentKind_SEGMENT_KIND_REPO_RULES, rules),
		&pb.Segment{Id: "term", Kind: pb.SegmentKind_SEGMENT_KIND_TERMINAL, InvalidateOnTurn: true, Tokens: term},
		&pb.Segment{Id: "ask", Kind: pb.SegmentKind_SEGMENT_KIND_USER_TURN, Tokens: ask},
	)
	id := d.open("a")
	d.mustEnsure(id, m)
	d.mustSuffix(id)
	first := d.greedy(id, 4)
	// on_turn: the same prompt again reuses nothing from "term" on; the
	// recomputed suffix continues as the first turn did.
	d.mustEnsure(id, m)
	if pr := d.mustSuffix(id); pr.GetReusedTokens() != 0 || pr.GetPrefilledTokens() != 40 {
		t.Fatalf("after the turn ended, suffix %+v: want the 40 suffix tokens prefilled again", pr)
	}
	if again := d.greedy(id, 4); !slices.Equal(again, first) {
		t.Fatalf("recomputed suffix continues %v, first turn %v", again, first)
	}
	// on_edit: an unrelated path changes nothing; pkg/a.go cuts at "file".
	if r := d.reportEdit(id, "pkg/b.go"); r.GetSessions() != 0 {
		t.Fatalf("unrelated edit: %+v", r)
	}
	r := d.reportEdit(id, "./pkg/a.go")
	if r.GetSessions() != 1 || !slices.Equal(r.GetSegments(), []string{"file"}) || r.GetDroppedTokens() != 1+100+100+50+40+4-101 {
		t.Fatalf("edit report %+v", r)
	}
	if ex := d.explain(id); ex.GetResidentTokens() != 101 {
		t.Fatalf("after the edit %d tokens resident, want 101 (BOS + sys)", ex.GetResidentTokens())
	}
	res := d.resident()
	if len(res.Tokens) != 101 || !containsRun(res.Tokens, sys) || res.Positions[100] != 100 {
		t.Fatalf("engine after the edit: %d tokens", len(res.Tokens))
	}
	if pr := d.mustEnsure(id, m); pr.GetReusedTokens() != 101 || pr.GetPrefilledTokens() != 150 {
		t.Fatalf("after the edit: %+v, want 101 reused and 150 prefilled", pr)
	}
	d.mustSuffix(id)
	if third := d.greedy(id, 4); !slices.Equal(third, first) {
		t.Fatalf("after the edit the same prompt continues %v, first %v", third, first)
	}
}

// In a hot set, an edit report cuts the tape at the first invalidated
// token (the block holding it keeps its head as the open tail); the
// engine then holds only hot ranges of what is left, compacted.
func TestFakeHotSetEditCutsAtTheToken(t *testing.T) {
	d := startFake(t, hotConfig(), enginefake.Options{})
	sys, file := ids(1, 100, 0, 250), ids(2, 1500, 0, 250)
	m := manifest(
		seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys),
		&pb.Segment{Id: "file", Kind: pb.SegmentKind_SEGMENT_KIND_REPO_MAP, Stable: true, InvalidateOnEdit: true, Paths: []string{"a.go"}, Tokens: file},
	)
	id := d.open("a")
	d.mustEnsure(id, m)
	checkHotLayout(t, d, id, withBOS(sys, file))
	r := d.reportEdit(id, "a.go")
	if r.GetSessions() != 1 || !slices.Equal(r.GetSegments(), []string{"file"}) {
		t.Fatalf("edit report %+v", r)
	}
	ex := checkHotLayout(t, d, id, withBOS(sys, file))
	if n := ex.GetResidentTokens(); n != 101 || int64(n)+r.GetDroppedTokens() != 1601 {
		t.Fatalf("after the edit %d tokens resident, %d dropped: want the tape cut at token 101", n, r.GetDroppedTokens())
	}
	if pr := d.mustEnsure(id, m); pr.GetReusedTokens() != ex.GetResidentTokens() || pr.GetPromptTokens() != 1601 {
		t.Fatalf("after the edit: %+v", pr)
	}
	checkHotLayout(t, d, id, withBOS(sys, file))
}
