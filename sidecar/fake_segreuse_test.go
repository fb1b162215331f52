package sidecar_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/ctxd/ctxd/engine/enginefake"
	"github.com/ctxd/ctxd/policy"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar"
)

// segReuseDaemon is a dense daemon whose latency target leaves no
// recompute budget: every unchanged segment past an early change is moved.
func segReuseDaemon(t *testing.T, mode policy.ReuseMode) *fakeDaemon {
	return startFake(t, sidecar.Config{ContextTokens: 2048, NoCold: true, Reuse: mode, ReuseLatency: time.Nanosecond}, enginefake.Options{})
}

func residentTokens(r enginefake.Resident) []int32 {
	out := make([]int32, len(r.Tokens))
	for i, tok := range r.Tokens {
		out[i] = int32(tok)
	}
	return out
}

func ensureExact(d *fakeDaemon, id uint64, m *pb.Manifest) *pb.PrefixReply {
	d.t.Helper()
	r := d.must(d.call(&pb.Request{Body: &pb.Request_EnsurePrefix{EnsurePrefix: &pb.EnsurePrefixRequest{SessionId: id, Manifest: m, ExactReuse: true}}}, nil))
	return r.GetEnsurePrefix()
}

// An early change (the system prompt's date) keeps the KV of the
// unchanged segments after it, moved to their new positions: only the
// changed segment is prefilled, the reuse is reported as approximate, and
// the engine holds the new prompt at consecutive positions.
func TestFakeSegmentReuseAfterEarlyChange(t *testing.T) {
	d := segReuseDaemon(t, policy.ReuseAuto)
	sys, tools, file := ids(1, 100, 0, 250), ids(2, 300, 0, 250), ids(3, 200, 0, 250)
	a := d.open("a")
	d.mustEnsure(a, manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools), seg("file", pb.SegmentKind_SEGMENT_KIND_REPO_MAP, file)))
	d.mustSuffix(a)
	gen := d.greedy(a, 4)

	// The date changes (and the system prompt grows by 7 tokens).
	sys2 := append(append([]int32(nil), ids(9, 7, 0, 250)...), sys...)
	m2 := manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys2), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools), seg("file", pb.SegmentKind_SEGMENT_KIND_REPO_MAP, file))
	r := d.mustEnsure(a, m2)
	// The old system prompt is the new one's unchanged tail: moved too.
	if r.GetPromptTokens() != 608 || r.GetReusedTokens() != 601 || r.GetApproximateTokens() != 600 || r.GetPrefilledTokens() != 7 || r.GetRecomputedTokens() != 0 {
		t.Fatalf("after the change %+v: want BOS kept, 600 tokens moved, the 7 new ones prefilled", r)
	}
	if r.GetReuseChoice() == "" {
		t.Fatal("no reuse choice reported")
	}
	if ex := d.explain(a); ex.GetApproximateTokens() != int64(612-8) || ex.GetLastPrefix().GetApproximateTokens() != 600 {
		t.Fatalf("explain: %d approximate tokens, last prefix %+v", ex.GetApproximateTokens(), ex.GetLastPrefix())
	}
	// The tokens generated after the old prompt move behind the new one
	// (what a prefix call keeps past the stable prefix).
	want := append(withBOS(sys2, tools, file), gen...)
	res := d.resident()
	if got := residentTokens(res); !slices.Equal(got, want) || res.Positions[len(res.Positions)-1] != len(want)-1 {
		t.Fatalf("engine holds %d tokens, want the %d of the new prompt and the old turn at their positions", len(got), len(want))
	}
	s := d.mustSuffix(a)
	if s.GetPrefilledTokens() != 1 || s.GetApproximateTokens() != 0 || s.GetDroppedTokens() != int64(len(gen))+1 {
		t.Fatalf("suffix %+v: want the last token recomputed for its logits", s)
	}
	d.greedy(a, 8)

	// The approximate KV differs from a cold prefill's; asking for exact
	// reuse keeps only the exact part (BOS and the 7 prefilled tokens)
	// and prefills the rest.
	b := d.open("b")
	ensureExact(d, b, m2) // a cold prefill: no KV copied from a
	d.mustSuffix(b)
	coldState := d.resident().State
	cold := d.greedy(b, 8)
	d.mustEnsure(a, m2)
	if r := ensureExact(d, a, m2); r.GetReusedTokens() != 8 || r.GetApproximateTokens() != 0 || r.GetPrefilledTokens() != 600 {
		t.Fatalf("exact request %+v: want everything past the 7 prefilled tokens prefilled", r)
	}
	d.mustSuffix(a)
	if !bytes.Equal(d.resident().State, coldState) {
		t.Fatal("exact request: KV differs from a cold prefill")
	}
	if exact := d.greedy(a, 8); !slices.Equal(exact, cold) {
		t.Fatalf("exact %v, cold %v", exact, cold)
	}
}

// In exact mode nothing is moved: the turn is a cold prefill past the
// change, bit for bit.
func TestFakeSegmentReuseExactMode(t *testing.T) {
	d := segReuseDaemon(t, policy.ReuseExact)
	sys, tools := ids(1, 100, 0, 250), ids(2, 300, 0, 250)
	a := d.open("a")
	d.mustEnsure(a, manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools)))
	d.mustSuffix(a)
	sys2 := slices.Clone(sys)
	sys2[3]++
	m2 := manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys2), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools))
	if r := d.mustEnsure(a, m2); r.GetReusedTokens() != 4 || r.GetApproximateTokens() != 0 || r.GetPrefilledTokens() != 397 {
		t.Fatalf("exact mode %+v", r)
	}
	d.mustSuffix(a)
	state := d.resident().State
	b := d.open("b")
	d.mustEnsure(b, m2)
	d.mustSuffix(b)
	if !bytes.Equal(d.resident().State, state) {
		t.Fatal("exact mode: warm KV differs from cold KV")
	}
}

// An ensure-prefix call after an early change keeps the conversation that
// followed the stable prefix (moved behind the new prefix), so the suffix
// that repeats it is reused, not prefilled; a sub-agent-like reorder
// reuses only what keeps its order.
func TestFakeSegmentReuseKeepsConversation(t *testing.T) {
	d := segReuseDaemon(t, policy.ReuseAuto)
	sys, tools, user := ids(1, 100, 0, 250), ids(2, 300, 0, 250), ids(3, 60, 0, 250)
	stable := func(s []int32) []*pb.Segment {
		return []*pb.Segment{seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, s), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools)}
	}
	userSeg := &pb.Segment{Id: "u1", Kind: pb.SegmentKind_SEGMENT_KIND_USER_TURN, Tokens: user}
	a := d.open("a")
	d.mustEnsure(a, manifest(append(stable(sys), userSeg)...))
	d.mustSuffix(a)
	sys2 := slices.Clone(sys)
	sys2[50]++
	r := d.mustEnsure(a, manifest(append(stable(sys2), userSeg)...))
	if r.GetPromptTokens() != 401 || r.GetReusedTokens() != 400 || r.GetPrefilledTokens() != 1 || r.GetApproximateTokens() != 349 {
		t.Fatalf("ensure %+v: want sys's first 50 kept, the changed token prefilled, sys's other 49 and the tools moved", r)
	}
	s := d.mustSuffix(a)
	if s.GetReusedTokens() != 59 || s.GetPrefilledTokens() != 1 || s.GetApproximateTokens() != 59 {
		t.Fatalf("suffix %+v: want the user turn reused (moved) but its last token", s)
	}
	if got := residentTokens(d.resident()); !slices.Equal(got, withBOS(sys2, tools, user)) {
		t.Fatal("engine does not hold the new prompt")
	}
	ex := d.explain(a)
	if ex.GetResidentTokens() != 461 {
		t.Fatalf("explain: %d resident", ex.GetResidentTokens())
	}
}

// A hot set moves the KV of unchanged segments past an early change, from
// the engine and (whole parked blocks) from the arena, and streams the
// rest in: the layout's invariants hold (checkHotLayout), whether the
// prompt fits the hot budget or not.
func TestFakeHotSetSegmentReuse(t *testing.T) {
	cfg := hotConfig()
	cfg.ReuseLatency = time.Nanosecond
	d := startFake(t, cfg, enginefake.Options{})
	for _, n := range []int{150, 1000} {
		sys, tools, user := ids(1, 40, 0, 250), ids(uint64(n), n, 0, 250), ids(3, 30, 0, 250)
		id := d.open("hot")
		userSeg := &pb.Segment{Id: "u", Kind: pb.SegmentKind_SEGMENT_KIND_USER_TURN, Tokens: user}
		d.mustEnsure(id, manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools), userSeg))
		d.mustSuffix(id)
		gen := d.greedy(id, 5)
		sys2 := slices.Clone(sys)
		sys2[10]++
		r := d.mustEnsure(id, manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys2), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools), userSeg))
		if r.GetApproximateTokens() == 0 || r.GetReusedTokens()+r.GetPrefilledTokens() != int64(1+40+n) {
			t.Fatalf("tools %d: ensure %+v: want part of the tools moved", n, r)
		}
		if n == 150 && r.GetApproximateTokens() != 29+150 {
			t.Fatalf("tools %d: %d moved, want the system prompt's 29 tokens after the change and all the tools (the prompt fits the hot budget)", n, r.GetApproximateTokens())
		}
		if n == 1000 && r.GetApproximateTokens() < 900 {
			t.Fatalf("tools %d: %d moved, want the parked blocks read back from the arena too", n, r.GetApproximateTokens())
		}
		t.Logf("tools %d: ensure reused %d (approximate %d) prefilled %d", n, r.GetReusedTokens(), r.GetApproximateTokens(), r.GetPrefilledTokens())
		checkHotLayout(t, d, id, append(withBOS(sys2, tools, user), gen...))
		s := d.mustSuffix(id)
		if s.GetPrefilledTokens() > 1 {
			t.Fatalf("tools %d: suffix %+v: the conversation was moved too, only the logits token is prefilled", n, s)
		}
		checkHotLayout(t, d, id, withBOS(sys2, tools, user))
		d.greedy(id, 3)
		d.closeSession(id)
	}
}

// A snapshot of a session holding approximate KV restores it as
// approximate: a restored session never reports it as exact.
func TestFakeSegmentReuseSnapshotKeepsApproximate(t *testing.T) {
	for _, hot := range []bool{false, true} {
		cfg := sidecar.Config{ContextTokens: 2048, ReuseLatency: time.Nanosecond}
		if hot {
			cfg = hotConfig()
			cfg.NoCold, cfg.ReuseLatency = false, time.Nanosecond
		}
		d := startFake(t, cfg, enginefake.Options{})
		sys, tools := ids(1, 100, 0, 250), ids(2, 120, 0, 250)
		a := d.open("a")
		d.mustEnsure(a, manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools)))
		sys2 := slices.Clone(sys)
		sys2[5]++
		if r := d.mustEnsure(a, manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys2), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools))); r.GetApproximateTokens() != 94+120 {
			t.Fatalf("hot %v: ensure %+v", hot, r)
		}
		d.snapshot(a, "approx")
		b := d.open("b")
		rep, err := d.restore(b, "approx")
		if err != nil {
			t.Fatal(err)
		}
		// What came back as saved bytes past the first moved token (7:
		// the system prompt's tail after the change) is approximate; what
		// a dense restore chose to prefill again is exact.
		want := int64(94 + 120)
		if !hot && rep.GetRestoredTokens() <= 7 {
			want = 0
		}
		if ex := d.explain(b); ex.GetApproximateTokens() != want {
			t.Fatalf("hot %v: restored session (%+v) reports %d approximate tokens, want %d", hot, rep, ex.GetApproximateTokens(), want)
		}
	}
}

// A side request (Qwen Code's memory extractor) repeats a closing
// instruction after a history that grows: the ensure-prefix call keeps
// the instruction (moved behind the new history) so the prefill-suffix
// call that repeats it reuses it instead of prefilling it again.
func TestFakeSegmentReuseKeepsClosingInstruction(t *testing.T) {
	d := segReuseDaemon(t, policy.ReuseAuto)
	sys, m1, closing := ids(1, 100, 0, 250), ids(2, 80, 0, 250), ids(4, 300, 0, 250)
	// Every message starts with the same marker: the new message and the
	// old closing instruction share their first tokens.
	m2 := append(slices.Clone(closing[:5]), ids(3, 55, 0, 250)...)
	tail := &pb.Segment{Id: "closing", Kind: pb.SegmentKind_SEGMENT_KIND_USER_TURN, Tokens: closing}
	a := d.open("side")
	d.mustEnsure(a, manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("m1", pb.SegmentKind_SEGMENT_KIND_USER_TURN, m1), tail))
	d.mustSuffix(a)
	d.greedy(a, 2)
	m := manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("m1", pb.SegmentKind_SEGMENT_KIND_USER_TURN, m1), seg("m2", pb.SegmentKind_SEGMENT_KIND_USER_TURN, m2), tail)
	e := d.mustEnsure(a, m)
	s := d.mustSuffix(a)
	if e.GetPrefilledTokens() != 55 || s.GetPrefilledTokens() > 1 || s.GetApproximateTokens() < 299 {
		t.Fatalf("ensure %+v, suffix %+v: want only m2 past its shared marker prefilled, the closing instruction reused", e, s)
	}
	if got := residentTokens(d.resident()); !slices.Equal(got, withBOS(sys, m1, m2, closing)) {
		t.Fatal("the engine does not hold the new prompt")
	}
}
