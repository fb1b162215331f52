package sidecar

import (
	"context"
	"testing"

	"github.com/ctxd/ctxd/client"
)

// TestResumeStopsAtTheManifestsTokens: session A prefills P, decodes 16
// tokens and closes (automatic snapshot); a new session B with the same
// manifest resumes from that snapshot but must hold exactly P, so its
// greedy tokens equal those of a fresh cold session.
func TestResumeStopsAtTheManifestsTokens(t *testing.T) {
	ctx := context.Background()
	ts := startServer(t, Config{ContextTokens: 2048, IdleSnapshot: -1})
	c := dial(t, ts)
	m := tokenManifest(randomTokens(21, 1500))

	cold, _, err := c.OpenSessionOptions(ctx, client.SessionOptions{Name: "cold", Manifest: &m, Cold: true})
	if err != nil {
		t.Fatal(err)
	}
	want := greedyN(t, cold, 16)
	if err := cold.Close(ctx); err != nil {
		t.Fatal(err)
	}

	a, err := c.OpenSession(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.EnsurePrefix(ctx, m); err != nil {
		t.Fatal(err)
	}
	greedyN(t, a, 16)
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ts.srv.snaps.Wait(context.Background()) // the automatic snapshot is written

	b, err := c.OpenSession(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := b.EnsurePrefix(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if pr.ResumedSnapshot != "auto-a" {
		t.Fatalf("no resume from a's snapshot: %+v", pr)
	}
	ex, err := b.Explain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ex.ResidentTokens != pr.PromptTokens || ex.GeneratedTokens != 0 {
		t.Fatalf("after resume the session holds %d tokens (%d generated); the manifest has %d",
			ex.ResidentTokens, ex.GeneratedTokens, pr.PromptTokens)
	}
	if got := greedyN(t, b, 16); !equal(got, want) {
		t.Fatalf("resumed session continues %v; a cold session %v", got, want)
	}
}

// TestArenaResumeStopsAtTheManifestsTokens: the same for a hot-set
// session adopting a closed session's parked blocks, generated tokens
// sealed among them.
func TestArenaResumeStopsAtTheManifestsTokens(t *testing.T) {
	ctx := context.Background()
	ts := startServer(t, Config{ContextTokens: 512, HotTokens: 512, ArenaBytes: 64 << 20, NoCold: true})
	c := dial(t, ts)
	m := tokenManifest(randomTokens(22, 1500))
	a, err := c.OpenSession(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.EnsurePrefix(ctx, m); err != nil {
		t.Fatal(err)
	}
	greedyN(t, a, 200) // seals generated blocks into the arena
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := c.OpenSession(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := b.EnsurePrefix(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if pr.ResumedSnapshot != "arena" {
		t.Fatalf("no resume from the arena: %+v", pr)
	}
	ex, err := b.Explain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ex.ResidentTokens != pr.PromptTokens || ex.GeneratedTokens != 0 {
		t.Fatalf("after resume the session holds %d tokens (%d generated); the manifest has %d",
			ex.ResidentTokens, ex.GeneratedTokens, pr.PromptTokens)
	}
	checkHot(t, ts.srv)
}
