package sidecar_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/engine/enginefake"
	"github.com/ctxd/ctxd/policy"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar"
)

// openCold opens a session that never resumes (a cold reference).
func (d *fakeDaemon) openCold(name string) uint64 {
	d.t.Helper()
	r := d.must(d.call(&pb.Request{Body: &pb.Request_OpenSession{OpenSession: &pb.OpenSessionRequest{Name: name, Cold: true}}}, nil))
	return r.GetOpenSession().GetSessionId()
}

// continueManifests are an agent's prompt before and after a new process
// (Qwen Code --continue): the memory file near the start changed, the
// tool schemas and the conversation after it did not.
func continueManifests() (before, after *pb.Manifest, after3 [4][]int32) {
	sys, mem, tools, hist := ids(31, 120, 0, 250), ids(32, 40, 0, 250), ids(33, 1200, 0, 250), ids(34, 900, 0, 250)
	mem2 := ids(35, 55, 0, 250)
	mk := func(mem []int32) *pb.Manifest {
		return manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("mem", pb.SegmentKind_SEGMENT_KIND_REPO_RULES, mem),
			seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools), seg("hist", pb.SegmentKind_SEGMENT_KIND_USER_TURN, hist))
	}
	return mk(mem), mk(mem2), [4][]int32{sys, mem2, tools, hist}
}

// slowPrefill is a fake engine whose prefill costs 20 µs a token, so
// reading a snapshot's blocks back is cheaper than prefilling them
// (policy.PlanRestore), as on a real model.
func slowPrefill() enginefake.Options {
	return enginefake.Options{TrainedContext: 8192, Faults: &enginefake.Faults{Decode: func(_ int, toks []engine.Token, _ int) error {
		time.Sleep(time.Duration(len(toks)) * 20 * time.Microsecond)
		return nil
	}}}
}

// A restarted daemon resumes a new process of an agent whose prompt changed
// early (its memory file) from the old process's automatic snapshot: the
// common prefix exactly and the unchanged segments after the change moved
// into place (approximate, reported so); only the changed segment is
// prefilled. A request asking exact reuse resumes only the common prefix
// and holds exactly a cold prefill's KV.
func TestFakeResumePastAnEarlyChange(t *testing.T) {
	d := startFake(t, sidecar.Config{ContextTokens: 4096, Reuse: policy.ReuseAuto, ReuseLatency: time.Nanosecond}, slowPrefill())
	m1, m2, parts := continueManifests()
	a := d.open("a")
	d.mustEnsure(a, m1)
	d.mustSuffix(a)
	d.greedy(a, 8)
	d.closeSession(a)
	d.waitSnapshot("auto-a")
	d = d.restart()

	b := d.open("b")
	pr := d.mustEnsure(b, m2)
	want := withBOS(parts[0], parts[1], parts[2], parts[3])
	if pr.GetResumedSnapshot() != "auto-a" || pr.GetPromptTokens() != int64(len(want)) {
		t.Fatalf("no resume from a's snapshot: %+v", pr)
	}
	// BOS and the system prompt kept exactly, tools and history moved.
	if pr.GetReusedTokens() != 121+2100 || pr.GetApproximateTokens() != 2100 || pr.GetPrefilledTokens() != 55 || pr.GetRecomputedTokens() != 0 || pr.GetResumedTokens() != 121+2100 {
		t.Fatalf("resume past the change %+v: want 121 exact + 2100 moved, 55 prefilled", pr)
	}
	res := d.resident()
	if got := residentTokens(res); !slices.Equal(got, want) || res.Positions[len(res.Positions)-1] != len(want)-1 {
		t.Fatalf("engine holds %d tokens, want the %d of the new prompt at their positions", len(got), len(want))
	}
	ex := d.explain(b)
	if ex.GetApproximateTokens() != 2100 || !strings.Contains(ex.GetRestore().GetChoice(), "past the first change") || !ex.GetRestore().GetAutomatic() {
		t.Fatalf("explain: %d approximate, restore %+v", ex.GetApproximateTokens(), ex.GetRestore())
	}
	d.mustSuffix(b)
	d.greedy(b, 8)

	// Exact: only the common prefix comes back; the KV is a cold prefill's.
	cold := d.openCold("cold")
	d.mustEnsure(cold, m2)
	d.mustSuffix(cold)
	coldState := d.resident().State
	coldNext := d.greedy(cold, 8)
	c := d.open("c")
	if r := ensureExact(d, c, m2); r.GetResumedSnapshot() != "auto-a" || r.GetReusedTokens() != 121 || r.GetApproximateTokens() != 0 || r.GetPrefilledTokens() != 2155 {
		t.Fatalf("exact request %+v: want the 121-token prefix resumed, the rest prefilled", r)
	}
	d.mustSuffix(c)
	if !bytes.Equal(d.resident().State, coldState) {
		t.Fatal("exact request after a resume: KV differs from a cold prefill")
	}
	if got := d.greedy(c, 8); !slices.Equal(got, coldNext) {
		t.Fatalf("exact resume continues %v, cold %v", got, coldNext)
	}
}

// Under --reuse exact a resume never brings back segments past the change.
func TestFakeResumePastAnEarlyChangeExactMode(t *testing.T) {
	d := startFake(t, sidecar.Config{ContextTokens: 4096, Reuse: policy.ReuseExact, ReuseLatency: time.Nanosecond}, slowPrefill())
	m1, m2, _ := continueManifests()
	a := d.open("a")
	d.mustEnsure(a, m1)
	d.closeSession(a)
	d.waitSnapshot("auto-a")
	b := d.open("b")
	if r := d.mustEnsure(b, m2); r.GetResumedSnapshot() != "auto-a" || r.GetReusedTokens() != 121 || r.GetApproximateTokens() != 0 || r.GetPrefilledTokens() != 2155 {
		t.Fatalf("exact mode %+v: want the 121-token prefix resumed, the rest prefilled", r)
	}
	if ex := d.explain(b); ex.GetApproximateTokens() != 0 || strings.Contains(ex.GetRestore().GetChoice(), "past the first change") {
		t.Fatalf("exact mode explain: %d approximate, restore %+v", ex.GetApproximateTokens(), ex.GetRestore())
	}
}

// A hot-set session resumes past an early change too: the snapshot's
// blocks come back, the unchanged segments after the change are moved
// into place (from the engine and, whole parked blocks, from the arena),
// and the layout's invariants hold.
func TestFakeHotResumePastAnEarlyChange(t *testing.T) {
	cfg := hotConfig()
	cfg.NoCold, cfg.ReuseLatency = false, time.Nanosecond
	d := startFake(t, cfg, enginefake.Options{})
	sys, mem, tools, hist := ids(51, 40, 0, 250), ids(52, 20, 0, 250), ids(53, 1000, 0, 250), ids(54, 300, 0, 250)
	mem2 := ids(55, 25, 0, 250)
	mk := func(mem []int32) *pb.Manifest {
		return manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("mem", pb.SegmentKind_SEGMENT_KIND_REPO_RULES, mem),
			seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools), seg("hist", pb.SegmentKind_SEGMENT_KIND_USER_TURN, hist))
	}
	a := d.open("a")
	d.mustEnsure(a, mk(mem))
	d.mustSuffix(a)
	d.greedy(a, 5)
	d.closeSession(a)
	d.waitSnapshot("auto-a")
	d = d.restart()

	b := d.open("b")
	pr := d.mustEnsure(b, mk(mem2))
	t.Logf("hot resume: %+v", pr)
	if pr.GetResumedSnapshot() != "auto-a" || pr.GetApproximateTokens() < 1000 || pr.GetPrefilledTokens() > 25+300 || pr.GetResumedTokens() != pr.GetReusedTokens() {
		t.Fatalf("hot resume past the change %+v: want the tools (at least) moved, at most the memory file and the history prefilled", pr)
	}
	checkHotLayout(t, d, b, withBOS(sys, mem2, tools, hist))
	d.mustSuffix(b)
	d.greedy(b, 3)
}
