package sidecar_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/engine/enginefake"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// orphanPrompt is an agent's prompt: system prompt (holding the date),
// tools, the conversation so far.
func orphanPrompt(sys, tools, conv []int32) *pb.Manifest {
	return manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("tools", pb.SegmentKind_SEGMENT_KIND_TOOLS, tools),
		seg("conv", pb.SegmentKind_SEGMENT_KIND_USER_TURN, conv))
}

// orphanAfterRestart runs a hot-set session on sys+tools+conv and a
// 4-token reply, restarts the daemon (the session's parked blocks and its
// open tail stay in the arena as an orphan tape, with their segment
// spans) and returns the restarted daemon; with restart false the session
// only closes.
func orphanAfterRestart(t *testing.T, sys, tools, conv []int32, restart bool) *fakeDaemon {
	d, _ := orphanReply(t, sys, tools, conv, restart)
	return d
}

// orphanReply is orphanAfterRestart, also returning the reply.
func orphanReply(t *testing.T, sys, tools, conv []int32, restart bool) (*fakeDaemon, []int32) {
	cfg := hotConfig()
	cfg.ReuseLatency = time.Nanosecond // no recompute budget: every matched token is moved
	d := startFake(t, cfg, enginefake.Options{})
	a := d.open("a")
	d.mustEnsure(a, orphanPrompt(sys, tools, conv))
	d.mustSuffix(a)
	reply := d.greedy(a, 4)
	if !restart {
		d.closeSession(a)
		return d, reply
	}
	return d.restart(), reply
}

// After a restart (or the session's close), a new session whose system
// prompt's date changed early (before anything could be adopted) copies
// the tools and the conversation from the orphan tape the old session
// left in the arena:
// only the changed system prompt is prefilled (new + budget, the budget
// 0 here), the copy is reported approximate and the layout holds. An
// exact request copies nothing.
func TestFakeOrphanLendsSegmentsAfterRestart(t *testing.T) {
	for _, restart := range []bool{true, false} {
		t.Run(map[bool]string{true: "restart", false: "closed"}[restart], func(t *testing.T) { orphanLends(t, restart) })
	}
}

func orphanLends(t *testing.T, restart bool) {
	// Block-aligned segments (4 sinks, then 64-token blocks): a donor
	// copies whole blocks, the rest of a run is prefilled.
	sys, tools, conv := ids(1, 67, 0, 250), ids(2, 1024, 0, 250), ids(3, 128, 0, 250)
	d := orphanAfterRestart(t, sys, tools, conv, restart)
	sys2 := slices.Clone(sys)
	for i := 3; i < 7; i++ {
		sys2[i]++ // the date, right after the sinks (tape index 4)
	}
	b := d.open("b")
	r := d.mustEnsure(b, orphanPrompt(sys2, tools, conv))
	t.Logf("after the restart: %+v", r)
	// New as eval bound counts it: past the exact reuse, in no segment
	// held (BOS and the changed system prompt).
	exact := r.GetReusedTokens() - r.GetApproximateTokens()
	newTokens := int64(len(withBOS(sys2))) - exact
	if r.GetResumedSnapshot() != "" || r.GetApproximateTokens() != 1152 || r.GetPrefilledTokens() != newTokens ||
		r.GetPrefilledTokens() > newTokens+r.GetRecomputeBudgetTokens() {
		t.Fatalf("%+v: want the tools and the conversation (1152 tokens) copied from the orphan tape, %d prefilled", r, newTokens)
	}
	if !strings.Contains(r.GetReuseChoice(), "copied from session") {
		t.Fatalf("reuse choice %q does not name the orphan tape's session", r.GetReuseChoice())
	}
	checkHotLayout(t, d, b, withBOS(sys2, tools, conv))
	d.mustSuffix(b)
	d.greedy(b, 3)

	// An exact request copies nothing (its prefix is too short to adopt).
	e := d.open("exact")
	sys3 := slices.Clone(sys)
	sys3[2]++
	if r := ensureExact(d, e, orphanPrompt(sys3, tools, conv)); r.GetApproximateTokens() != 0 || r.GetPrefilledTokens() != int64(len(withBOS(sys3, tools, conv))) {
		t.Fatalf("exact request: %+v: want nothing copied", r)
	}
}

// When the change comes late enough for the new session to adopt the
// orphan tape's common prefix, the tape's unchanged segments past the
// change are kept too (the resume plans them as for a snapshot) and moved
// into place: only the changed date is prefilled. What the tape held
// after them (the reply) is kept behind the new prefix, as the closed
// session's ensure-prefix call would have kept it.
func TestFakeOrphanAdoptedPastTheChange(t *testing.T) {
	sys, tools, conv := ids(1, 195, 0, 250), ids(2, 1024, 0, 250), ids(3, 128, 0, 250)
	d, reply := orphanReply(t, sys, tools, conv, true)
	sys2 := slices.Clone(sys)
	for i := 131; i < 135; i++ {
		sys2[i]++ // the date, at tape index 132: a block boundary
	}
	b := d.open("b")
	r := d.mustEnsure(b, orphanPrompt(sys2, tools, conv))
	t.Logf("adopted: %+v", r)
	if r.GetResumedSnapshot() != "arena" || r.GetApproximateTokens() != 60+1152 || r.GetPrefilledTokens() != 4 || r.GetReusedTokens() != 132+60+1152 {
		t.Fatalf("%+v: want the prefix adopted (132), the system prompt's 60 tokens after the date, the tools and conversation (1152) moved, the date's 4 prefilled", r)
	}
	if ex := d.explain(b); !strings.Contains(ex.GetRestore().GetChoice(), "unchanged segments") {
		t.Fatalf("restore report %q does not say segments were kept", ex.GetRestore().GetChoice())
	}
	checkHotLayout(t, d, b, append(withBOS(sys2, tools, conv), reply...))
	d.mustSuffix(b)
	d.greedy(b, 3)
}

// A closed session's open tail — the end of its conversation and its
// reply, under one block, never sealed — is parked beside its orphan tape
// and lent with it, after a close and after a restart: a new session
// whose system prompt's date changed copies the tools and the whole
// conversation (the tail's part included), and prefills only the changed
// system prompt. When the change comes late enough to adopt the tape, the
// tail's segments are kept too.
func TestFakeOrphanLendsItsTail(t *testing.T) {
	for _, restart := range []bool{true, false} {
		t.Run(map[bool]string{true: "restart", false: "closed"}[restart], func(t *testing.T) {
			// 68 + 1024 + 100 = 1192 tokens: 4 sinks, 18 blocks, a 36-token tail.
			sys, tools, conv := ids(1, 67, 0, 250), ids(2, 1024, 0, 250), ids(3, 100, 0, 250)
			d := orphanAfterRestart(t, sys, tools, conv, restart)
			sys2 := slices.Clone(sys)
			for i := 3; i < 7; i++ {
				sys2[i]++ // the date, before anything could be adopted
			}
			b := d.open("b")
			r := d.mustEnsure(b, orphanPrompt(sys2, tools, conv))
			t.Logf("donor: %+v", r)
			newTokens := int64(len(withBOS(sys2))) - (r.GetReusedTokens() - r.GetApproximateTokens())
			if r.GetResumedSnapshot() != "" || r.GetApproximateTokens() != 1124 || r.GetPrefilledTokens() > newTokens+r.GetRecomputeBudgetTokens() {
				t.Fatalf("%+v: want the tools and the conversation (1124 tokens, the tail's included) copied, %d prefilled", r, newTokens)
			}
			checkHotLayout(t, d, b, withBOS(sys2, tools, conv))
			d.mustSuffix(b)
			d.greedy(b, 3)
		})
	}
	t.Run("adopted", func(t *testing.T) {
		sys, tools, conv := ids(1, 195, 0, 250), ids(2, 1024, 0, 250), ids(3, 100, 0, 250)
		d, reply := orphanReply(t, sys, tools, conv, true)
		sys2 := slices.Clone(sys)
		for i := 131; i < 135; i++ {
			sys2[i]++ // the date, at tape index 132: a block boundary
		}
		b := d.open("b")
		r := d.mustEnsure(b, orphanPrompt(sys2, tools, conv))
		t.Logf("adopted: %+v", r)
		if r.GetResumedSnapshot() != "arena" || r.GetApproximateTokens() != 60+1124 || r.GetPrefilledTokens() != 4 {
			t.Fatalf("%+v: want the prefix adopted, the system prompt's rest (60), the tools and conversation (1124, the tail's included) moved, the date's 4 prefilled", r)
		}
		checkHotLayout(t, d, b, append(withBOS(sys2, tools, conv), reply...))
		d.mustSuffix(b)
		d.greedy(b, 3)
	})
}

// As an agent sends it: the last message is not stable, so it comes in
// the prefill-suffix call, after the ensure-prefix call that adopted the
// orphan tape. The adoption keeps what the tape holds after its last
// matched segment — the last message, in the closed session's open tail,
// and the reply — behind the new prefix, as the closed session's own
// ensure-prefix call would have, so the suffix call reuses it: only the
// changed date and the token decoded for its logits are prefilled.
func TestFakeOrphanTailKeptForTheSuffix(t *testing.T) {
	for _, restart := range []bool{true, false} {
		t.Run(map[bool]string{true: "restart", false: "closed"}[restart], func(t *testing.T) {
			// BOS + 195 + 1024 + 100 = 1320 stable tokens, then 20: 4 sinks,
			// 20 blocks (to 1284), the open tail from there.
			sys, tools, conv, last := ids(1, 195, 0, 250), ids(2, 1024, 0, 250), ids(3, 100, 0, 250), ids(4, 20, 0, 250)
			lastSeg := func() *pb.Segment {
				return &pb.Segment{Id: "last", Kind: pb.SegmentKind_SEGMENT_KIND_USER_TURN, Tokens: last}
			}
			cfg := hotConfig()
			cfg.ReuseLatency = time.Nanosecond
			d := startFake(t, cfg, enginefake.Options{})
			a := d.open("a")
			d.mustEnsure(a, orphanPrompt(sys, tools, conv))
			d.mustSuffix(a, lastSeg())
			d.greedy(a, 4)
			if restart {
				d = d.restart()
			} else {
				d.closeSession(a)
			}
			sys2 := slices.Clone(sys)
			for i := 131; i < 135; i++ {
				sys2[i]++ // the date, at tape index 132: a block boundary
			}
			b := d.open("b")
			r := d.mustEnsure(b, orphanPrompt(sys2, tools, conv))
			if r.GetResumedSnapshot() != "arena" || r.GetApproximateTokens() != 60+1124 || r.GetPrefilledTokens() != 4 {
				t.Fatalf("ensure: %+v: want the prefix adopted, the system prompt's rest (60), the tools and conversation (1124) moved, the date's 4 prefilled", r)
			}
			s := d.mustSuffix(b, lastSeg())
			t.Logf("suffix: %+v", s)
			if s.GetPrefilledTokens() > 1 || s.GetApproximateTokens() < int64(len(last))-1 {
				t.Fatalf("suffix: %+v: want the last message reused from the closed session's tail, at most the last token prefilled", s)
			}
			d.greedy(b, 3)
		})
	}
}
