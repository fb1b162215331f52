package sidecar_test

import (
	"slices"
	"testing"
	"time"

	"github.com/ctxd/ctxd/engine/enginefake"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar"
)

// waitSnapshot polls ListSnapshots until name is listed: automatic
// snapshots are written after CloseSession returns.
func (d *fakeDaemon) waitSnapshot(name string) {
	d.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		r := d.must(d.call(&pb.Request{Body: &pb.Request_ListSnapshots{ListSnapshots: &pb.ListSnapshotsRequest{}}}, nil))
		for _, s := range r.GetListSnapshots().GetSnapshots() {
			if s.GetName() == name {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	d.t.Fatalf("snapshot %s never listed", name)
}

// A closed session's automatic snapshot resumes the next session with the
// same manifest, up to the manifest's own tokens (not what the closed
// session generated), which then continues as a cold session would.
func TestFakeResumeStopsAtTheManifestsTokens(t *testing.T) {
	d := startFake(t, sidecar.Config{ContextTokens: 2048}, enginefake.Options{TrainedContext: 4096})
	m := manifest(seg("a", pb.SegmentKind_SEGMENT_KIND_REPO_MAP, ids(21, 1500, 0, 250)))
	cold := d.open("cold")
	d.mustEnsure(cold, m)
	d.mustSuffix(cold)
	want := d.greedy(cold, 16)
	d.closeSession(cold)

	a := d.open("a")
	d.mustEnsure(a, m)
	d.mustSuffix(a)
	d.greedy(a, 16)
	d.closeSession(a)
	d.waitSnapshot("auto-a")

	b := d.open("b")
	pr := d.mustEnsure(b, m)
	if pr.GetResumedSnapshot() != "auto-a" {
		t.Fatalf("no resume from a's snapshot: %+v", pr)
	}
	if ex := d.explain(b); ex.GetResidentTokens() != pr.GetPromptTokens() || ex.GetGeneratedTokens() != 0 {
		t.Fatalf("after resume the session holds %d tokens (%d generated); the manifest has %d",
			ex.GetResidentTokens(), ex.GetGeneratedTokens(), pr.GetPromptTokens())
	}
	if r := d.resident(); int64(len(r.Tokens)) != pr.GetPromptTokens() {
		t.Fatalf("engine holds %d tokens after resume, the manifest %d", len(r.Tokens), pr.GetPromptTokens())
	}
	d.mustSuffix(b)
	if got := d.greedy(b, 16); !slices.Equal(got, want) {
		t.Fatalf("resumed session continues %v; a cold session %v", got, want)
	}
}

// The same for a hot-set session adopting a closed session's parked
// blocks from the arena, generated tokens sealed among them.
func TestFakeArenaResumeStopsAtTheManifestsTokens(t *testing.T) {
	d := startFake(t, sidecar.Config{ContextTokens: 512, HotTokens: 512, ArenaBytes: 16 << 20, NoCold: true}, enginefake.Options{})
	hay := ids(22, 1500, 0, 250)
	m := manifest(seg("a", pb.SegmentKind_SEGMENT_KIND_REPO_MAP, hay))
	a := d.open("a")
	d.mustEnsure(a, m)
	d.mustSuffix(a)
	d.greedy(a, 200) // seals generated blocks into the arena
	d.closeSession(a)
	b := d.open("b")
	pr := d.mustEnsure(b, m)
	if pr.GetResumedSnapshot() != "arena" || pr.GetResumedTokens() == 0 {
		t.Fatalf("no resume from the arena: %+v", pr)
	}
	ex := checkHotLayout(t, d, b, withBOS(hay))
	if ex.GetResidentTokens() != pr.GetPromptTokens() || ex.GetGeneratedTokens() != 0 {
		t.Fatalf("after resume the session holds %d tokens (%d generated); the manifest has %d",
			ex.GetResidentTokens(), ex.GetGeneratedTokens(), pr.GetPromptTokens())
	}
}
