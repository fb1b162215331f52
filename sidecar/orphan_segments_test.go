package sidecar

import (
	"context"

	"github.com/ctxd/ctxd/client"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestOrphanSegmentsAfterRestart (stories260K, hot set, no SSD tier): an
// agent's session closes, ctxd restarts, and the agent's new session
// sends the prompt with its system prompt's date changed at the start. No
// snapshot exists; the closed session's parked blocks are in the arena
// as an orphan tape with their segment spans, which lends the unchanged
// tools and history (copied from the arena, approximate): only the
// changed system prompt and the ends of blocks the segments cut are
// prefilled. The orphan tape was only read: a later session whose change
// comes after enough common prefix adopts it, keeping its segments past
// the change too.
func TestOrphanSegmentsAfterRestart(t *testing.T) {
	ctx := context.Background()
	ts, start := restartable(t, Config{ContextTokens: 512, HotTokens: 512, ArenaBytes: 64 << 20, NoCold: true, ReuseLatency: time.Nanosecond})
	c := dial(t, ts)
	// The history is five messages: the last lies in the open tail when
	// the session closes (not sealed into a block, so not parked).
	sys, tools, hist := randomTokens(51, 100), randomTokens(52, 800), randomTokens(53, 500)
	prompt := func(sys []int32) client.Manifest {
		return tokenManifest(sys, tools, hist[:100], hist[100:200], hist[200:300], hist[300:400], hist[400:])
	}
	a, err := c.OpenSession(ctx, "agent")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.EnsurePrefix(ctx, prompt(sys)); err != nil {
		t.Fatal(err)
	}
	greedyN(t, a, 8)
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	ts.stop()

	ts2 := start()
	c2 := dial(t, ts2)
	sys2 := slices.Clone(sys)
	for i := range 12 {
		sys2[i] = 3 + (sys2[i]+7)%500 // the date, at the very start
	}
	b := openSession(t, c2)
	pr, err := b.EnsurePrefix(ctx, prompt(sys2))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("donor: %d of %d reused (%d approximate), %d prefilled, %d recomputed; %s", pr.ReusedTokens, pr.PromptTokens, pr.ApproximateTokens, pr.PrefilledTokens, pr.RecomputedTokens, pr.ReuseChoice)
	// The tools and the first four messages (1200 tokens) as one run: all
	// but the two partial blocks at its ends come from the orphan's
	// blocks; the system prompt and the last message are prefilled.
	if pr.ResumedSnapshot != "" || pr.ApproximateTokens < 1200-2*64 || pr.PrefilledTokens > 101+100+2*64 || !strings.Contains(pr.ReuseChoice, "copied from session") {
		t.Fatalf("after the restart: %+v: want the tools and history copied from the orphan tape", pr)
	}
	checkHot(t, ts2.srv)
	if got := greedyN(t, b, 8); len(got) != 8 {
		t.Fatalf("decoded %v", got)
	}
	checkHot(t, ts2.srv)

	// The orphan tape is still there: a session sharing 81 tokens with it
	// adopts it and keeps its segments past the change.
	sys3 := slices.Clone(sys)
	sys3[80] = 3 + (sys3[80]+1)%500
	e := openSession(t, c2)
	er, err := e.EnsurePrefix(ctx, prompt(sys3))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("adopted: %q, %d of %d reused (%d approximate), %d prefilled", er.ResumedSnapshot, er.ReusedTokens, er.PromptTokens, er.ApproximateTokens, er.PrefilledTokens)
	if er.ResumedSnapshot != "arena" || er.ApproximateTokens < 1200-2*64 || er.PrefilledTokens > 101-68+100+2*64 {
		t.Fatalf("adopting the orphan past the change: %+v", er)
	}
	checkHot(t, ts2.srv)
	if got := greedyN(t, e, 8); len(got) != 8 {
		t.Fatalf("decoded %v", got)
	}
}
