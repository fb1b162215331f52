package sidecar_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxd/ctxd/engine/enginefake"
	"github.com/ctxd/ctxd/policy"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar"
)

// A sub-agent opens a session of its own with its own system prompt but
// the main conversation's tools: the tools' KV is copied from the main
// session (approximate, moved to its positions), only the new system
// prompt is prefilled, and the main session's KV is left exactly as it was.
func TestFakeDonorSubAgentCopiesTools(t *testing.T) {
	d := segReuseDaemon(t, policy.ReuseAuto)
	sys, tools, user := ids(1, 100, 0, 250), ids(2, 400, 0, 250), ids(3, 40, 0, 250)
	mainM := manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools), seg("u", pb.SegmentKind_SEGMENT_KIND_USER_TURN, user))
	main := d.open("main")
	d.mustEnsure(main, mainM)
	d.mustSuffix(main)
	d.greedy(main, 4)
	before := d.resident()

	subSys := ids(7, 60, 0, 250)
	subSys[0] = sys[0] + 1 // differs from the first token on
	sub := d.open("sub")
	r := d.mustEnsure(sub, manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, subSys), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools)))
	// BOS is copied exactly (the same token at the same position), the
	// tools approximately; the system prompt is new.
	if r.GetPromptTokens() != 461 || r.GetReusedTokens() != 401 || r.GetApproximateTokens() != 400 || r.GetPrefilledTokens() != 60 {
		t.Fatalf("sub-agent ensure %+v: want BOS and the 400 tool tokens copied, 60 prefilled", r)
	}
	if !strings.Contains(r.GetReuseChoice(), "copied from session") {
		t.Fatalf("reuse choice %q does not name the donor", r.GetReuseChoice())
	}
	if got := residentTokens(d.resident()); !slices.Equal(got, withBOS(subSys, tools)) {
		t.Fatal("the engine does not hold the sub-agent's prompt at consecutive positions")
	}
	if ex := d.explain(sub); ex.GetApproximateTokens() != 400 {
		t.Fatalf("explain: %d approximate tokens, want 400", ex.GetApproximateTokens())
	}
	d.mustSuffix(sub, &pb.Segment{Id: "task", Kind: pb.SegmentKind_SEGMENT_KIND_USER_TURN, Tokens: ids(8, 30, 0, 250)})
	d.greedy(sub, 4)

	// The main session is untouched: its KV comes back byte for byte.
	if r := d.mustEnsure(main, mainM); r.GetPrefilledTokens() != 0 {
		t.Fatalf("main ensure after the sub-agent: %+v", r)
	}
	if after := d.resident(); !bytes.Equal(after.State, before.State) {
		t.Fatal("the main session's KV changed while the sub-agent copied from it")
	}
}

// A new session whose prompt starts like a live session's copies that
// prefix at the same positions: exact reuse, byte for byte a cold
// prefill's KV. An exact request, or a daemon in --reuse exact, copies
// nothing.
func TestFakeDonorExactPrefixAndExactPath(t *testing.T) {
	sys, tools := ids(1, 100, 0, 250), ids(2, 300, 0, 250)
	m := manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools))
	d := segReuseDaemon(t, policy.ReuseAuto)
	a := d.open("a")
	d.mustEnsure(a, m)
	d.mustSuffix(a)
	d.greedy(a, 3)

	cold := d.open("cold")
	if r := ensureExact(d, cold, m); r.GetReusedTokens() != 0 || r.GetPrefilledTokens() != 401 {
		t.Fatalf("exact request %+v: want a cold prefill, nothing copied", r)
	}
	coldState := d.resident().State

	b := d.open("b")
	r := d.mustEnsure(b, m)
	if r.GetReusedTokens() != 401 || r.GetApproximateTokens() != 0 || r.GetPrefilledTokens() != 0 {
		t.Fatalf("same prompt in a new session %+v: want all 401 tokens copied exactly", r)
	}
	if !bytes.Equal(d.resident().State, coldState) {
		t.Fatal("a prefix copied from another session differs from a cold prefill")
	}

	for _, mode := range []policy.ReuseMode{policy.ReuseExact} {
		d := segReuseDaemon(t, mode)
		a := d.open("a")
		d.mustEnsure(a, m)
		d.mustSuffix(a)
		sub := d.open("sub")
		sys2 := slices.Clone(sys)
		sys2[0]++
		r := d.mustEnsure(sub, manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys2), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools)))
		if r.GetReusedTokens() != 0 || r.GetApproximateTokens() != 0 || r.GetPrefilledTokens() != 401 {
			t.Fatalf("--reuse %s: %+v: want nothing copied", mode, r)
		}
	}
}

// With a recompute budget the copied segments' first tokens are prefilled
// again: prefilled stays within new + budget.
func TestFakeDonorRecomputeBudget(t *testing.T) {
	d := startFake(t, sidecar.Config{ContextTokens: 2048, NoCold: true, ReuseLatency: time.Millisecond}, enginefake.Options{})
	sys, tools := ids(1, 100, 0, 250), ids(2, 400, 0, 250)
	a := d.open("a")
	d.mustEnsure(a, manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools)))
	sub := d.open("sub")
	sys2 := slices.Clone(sys)
	sys2[0]++
	r := d.mustEnsure(sub, manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys2), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools)))
	budget := r.GetRecomputeBudgetTokens()
	t.Logf("sub-agent: %+v", r)
	if r.GetPrefilledTokens() > 100+budget+1 || r.GetRecomputedTokens() > budget+1 {
		t.Fatalf("prefilled %d, recomputed %d: over new 100 + budget %d", r.GetPrefilledTokens(), r.GetRecomputedTokens(), budget)
	}
	if r.GetApproximateTokens()+r.GetRecomputedTokens() != 400 {
		t.Fatalf("%+v: the 400 tool tokens are either copied or recomputed", r)
	}
}

// A hot set copies the sealed blocks of another hot set's equal segments
// from their arena copies (read-only): the layouts of both hold.
func TestFakeDonorHotSet(t *testing.T) {
	cfg := hotConfig()
	cfg.ReuseLatency = time.Nanosecond
	d := startFake(t, cfg, enginefake.Options{})
	sys, tools := ids(1, 40, 0, 250), ids(2, 1000, 0, 250)
	main := d.open("main")
	d.mustEnsure(main, manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools)))
	d.mustSuffix(main)
	gen := d.greedy(main, 3)

	sys2 := ids(9, 50, 0, 250)
	sub := d.open("sub")
	r := d.mustEnsure(sub, manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys2), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools)))
	t.Logf("hot sub-agent: %+v", r)
	if r.GetApproximateTokens() < 800 || r.GetReusedTokens()+r.GetPrefilledTokens() != 1051 {
		t.Fatalf("hot sub-agent %+v: want most of the 1000 tool tokens copied from the main session's blocks", r)
	}
	checkHotLayout(t, d, sub, withBOS(sys2, tools))
	d.mustSuffix(sub)
	d.greedy(sub, 2)
	more := d.greedy(main, 1)
	checkHotLayout(t, d, main, append(append(withBOS(sys, tools), gen...), more...))
}

// opencode's sub-agent: the same system prompt and the first tools, then
// fewer tools (one segment that differs part-way). The common prefix with
// the main session is copied: exactly at the same positions in a dense
// daemon; in a hot set its blocks decoded at their own positions exactly
// (up to its first eviction), the rest from its sealed blocks
// (approximate).
func TestFakeDonorCommonPrefix(t *testing.T) {
	sys, tools, other := ids(1, 40, 0, 250), ids(2, 1000, 0, 250), ids(3, 100, 0, 250)
	subTools := append(slices.Clone(tools[:700]), other...)
	for _, hot := range []bool{false, true} {
		cfg := sidecar.Config{ContextTokens: 2048, NoCold: true, ReuseLatency: time.Nanosecond}
		if hot {
			cfg = hotConfig()
			cfg.ReuseLatency = time.Nanosecond
		}
		d := startFake(t, cfg, enginefake.Options{})
		main := d.open("main")
		d.mustEnsure(main, manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools)))
		d.mustSuffix(main)
		sub := d.open("sub")
		r := d.mustEnsure(sub, manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, subTools)))
		t.Logf("hot %v: %+v", hot, r)
		switch {
		case !hot && (r.GetReusedTokens() != 741 || r.GetApproximateTokens() != 0 || r.GetPrefilledTokens() != 100):
			t.Fatalf("dense: %+v: want the 741-token common prefix copied exactly", r)
		case hot && (r.GetReusedTokens() != 741 || r.GetPrefilledTokens() != 100 || r.GetApproximateTokens() >= 741 || r.GetApproximateTokens() < 500):
			t.Fatalf("hot: %+v: want the common prefix copied: the blocks decoded in place exactly, the rest approximately", r)
		}
		if hot {
			checkHotLayout(t, d, sub, withBOS(sys, subTools))
		} else if got := residentTokens(d.resident()); !slices.Equal(got, withBOS(sys, subTools)) {
			t.Fatal("dense: the engine does not hold the sub-agent's prompt")
		}
	}
}

// A copy from a donor that fails leaves both sessions consistent: the
// call prefills what the copy would have given (and says so), the main
// session's KV is untouched, and the sub-agent's next call synchronises
// its tape and KV.
func TestFakeDonorCopyFailureLeavesSessionsConsistent(t *testing.T) {
	var failing atomic.Bool
	d := startFake(t, sidecar.Config{ContextTokens: 2048, NoCold: true, ReuseLatency: time.Nanosecond}, enginefake.Options{Faults: &enginefake.Faults{
		Extract: func(int) error {
			if failing.Load() {
				return errors.New("injected extract failure")
			}
			return nil
		},
	}})
	sys, tools := ids(1, 100, 0, 250), ids(2, 400, 0, 250)
	mainM := manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools))
	main := d.open("main")
	d.mustEnsure(main, mainM)
	d.mustSuffix(main)
	before := d.resident()
	sub := d.open("sub")
	sys2 := ids(7, 60, 0, 250)
	subM := manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys2), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools))
	// Exact: no copy yet, so the daemon has no copy cost to weigh (the
	// fake prefills faster than any copy).
	ensureExact(d, sub, manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys2[:10])))
	failing.Store(true)
	if r, err := d.ensure(sub, subM); err != nil || !strings.Contains(r.GetReuseChoice(), "failed") {
		t.Fatalf("a failed copy failed the call or was not reported: %+v, %v", r, err)
	}
	if got := residentTokens(d.resident()); !slices.Equal(got, withBOS(sys2, tools)) {
		t.Fatal("the sub-agent's KV does not hold its prompt after a failed copy")
	}
	failing.Store(false)
	if r := d.mustEnsure(sub, subM); r.GetReusedTokens()+r.GetPrefilledTokens() != 461 {
		t.Fatalf("after the failure: %+v", r)
	}
	if got := residentTokens(d.resident()); !slices.Equal(got, withBOS(sys2, tools)) {
		t.Fatal("the sub-agent's KV does not hold its prompt after a failed copy")
	}
	d.mustEnsure(main, mainM)
	if !bytes.Equal(d.resident().State, before.State) {
		t.Fatal("the main session's KV changed")
	}
}
