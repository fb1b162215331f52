package sidecar

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/client"
)

// TestResumePastAnEarlyChangeAfterRestart: an agent's process closes (its
// automatic snapshot is written), ctxd restarts, and the agent's new
// process sends the prompt with a changed memory file near the start. The
// new session resumes the common prefix exactly and the unchanged tool
// schemas and history after the change from the snapshot, moved into
// place (reported approximate); only the changed segment is prefilled. A
// request asking exact reuse gets a cold prefill's continuation.
func TestResumePastAnEarlyChangeAfterRestart(t *testing.T) {
	ctx := context.Background()
	ts, start := restartable(t, Config{ContextTokens: 2048, ReuseLatency: time.Nanosecond})
	c := dial(t, ts)
	sys, mem, tools, hist := randomTokens(41, 100), randomTokens(42, 40), randomTokens(43, 800), randomTokens(44, 500)
	mem2 := randomTokens(45, 55)
	m1, m2 := tokenManifest(sys, mem, tools, hist), tokenManifest(sys, mem2, tools, hist)
	a, err := c.OpenSession(ctx, "agent")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.EnsurePrefix(ctx, m1); err != nil {
		t.Fatal(err)
	}
	greedyN(t, a, 8)
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	ts.stop() // waits for the automatic snapshot

	ts2 := start()
	c2 := dial(t, ts2)
	b := openSession(t, c2)
	pr, err := b.EnsurePrefix(ctx, m2)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("resumed %q: %d of %d reused (%d approximate), %d prefilled, %d recomputed", pr.ResumedSnapshot, pr.ReusedTokens, pr.PromptTokens, pr.ApproximateTokens, pr.PrefilledTokens, pr.RecomputedTokens)
	if pr.ResumedSnapshot != "auto-agent" || pr.ApproximateTokens != 1300 || pr.PrefilledTokens != 55 || pr.ResumedTokens != pr.ReusedTokens || pr.ExactTokens() != pr.PromptTokens-1355 {
		ex, _ := b.Explain(ctx)
		t.Fatalf("resume past the change: %+v (restore %+v): want the 1300 tokens after the changed segment moved, its 55 prefilled", pr, ex.Restore)
	}
	ex, err := b.Explain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restore: %d blocks read, %d recomputed; prefill %.0f tok/s, read %.3g B/s, decompress %.3g B/s", ex.Restore.RestoredBlocks, ex.Restore.RecomputedBlocks,
		ex.Restore.PrefillTokensPerS, ex.Restore.ReadBytesPerS, ex.Restore.DecompressBytesPerS)
	if ex.ApproximateTokens != 1300 || ex.ResidentTokens != pr.PromptTokens || ex.Restore == nil || !strings.Contains(ex.Restore.Choice, "past the first change") {
		t.Fatalf("explain after the resume: %d approximate, %d resident, restore %+v", ex.ApproximateTokens, ex.ResidentTokens, ex.Restore)
	}
	if got := greedyN(t, b, 8); len(got) != 8 {
		t.Fatalf("the resumed session decoded %v", got)
	}

	// Exact: the common prefix resumed, the rest prefilled, and the same
	// continuation as a cold session.
	cold, _, err := c2.OpenSessionOptions(ctx, client.SessionOptions{Name: "cold", Manifest: &m2, Cold: true})
	if err != nil {
		t.Fatal(err)
	}
	want := greedyN(t, cold, 8)
	e := openSession(t, c2)
	er, err := e.EnsurePrefix(client.WithExactReuse(ctx), m2)
	if err != nil {
		t.Fatal(err)
	}
	if er.ApproximateTokens != 0 || er.PrefilledTokens != 1355 {
		t.Fatalf("exact request after the restart: %+v", er)
	}
	if got := greedyN(t, e, 8); !equal(got, want) {
		t.Fatalf("exact resume continues %v; a cold session %v", got, want)
	}
}
