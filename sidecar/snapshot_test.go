package sidecar

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/client"
)

func randomTokens(seed uint64, n int) []int32 {
	rng := rand.New(rand.NewPCG(seed, 3))
	out := make([]int32, n)
	for i := range out {
		out[i] = 3 + rng.Int32N(500)
	}
	return out
}

func tokenManifest(ids ...[]int32) client.Manifest {
	var m client.Manifest
	for i, t := range ids {
		m.Segments = append(m.Segments, client.Segment{ID: "seg" + string(rune('a'+i)), Kind: client.KindRepoMap, Stable: true, Tokens: t})
	}
	return m
}

func greedyN(t *testing.T, s *client.Session, n int) []int32 {
	t.Helper()
	var out []int32
	if _, err := s.Decode(context.Background(), client.DecodeOptions{MaxTokens: n}, func(tok client.Token) error {
		out = append(out, tok.ID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// restartable runs a server on a fixed data directory that a test can
// stop and start again, as a restarted ctxd.
func restartable(t *testing.T, cfg Config) (*testServer, func() *testServer) {
	t.Helper()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	if cfg.IdleSnapshot == 0 {
		cfg.IdleSnapshot = -1
	}
	n := 0
	start := func() *testServer {
		n++
		c := cfg
		c.SocketPath = filepath.Join(t.TempDir(), "s", "ctxd.sock")
		return startServer(t, c)
	}
	return start(), start
}

func TestSnapshotRestoreAfterRestartIsBitExactDense(t *testing.T) {
	ctx := context.Background()
	ts, start := restartable(t, Config{ContextTokens: 2048})
	c := dial(t, ts)
	s := openSession(t, c)
	m := tokenManifest(randomTokens(1, 1100), randomTokens(2, 150))
	if _, err := s.EnsurePrefix(ctx, m); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Snapshot(ctx, "dense-a")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Tokens != 1251 || snap.Blocks != 2 || snap.NewBlocks != 2 || snap.CompressedBytes <= 0 {
		t.Fatalf("snapshot %+v: want 1251 tokens in 2 new blocks", snap)
	}
	before := greedyN(t, s, 12)
	// Saving again stores no new block.
	if again, err := c.Snapshot(ctx, s.ID(), "dense-b"); err != nil || again.NewBlocks > 1 {
		t.Fatalf("second snapshot: %+v %v (the unchanged first block must be shared)", again, err)
	}
	c.Close()
	ts.stop()

	ts2 := start()
	c2 := dial(t, ts2)
	s2 := openSession(t, c2)
	rep, err := s2.Restore(ctx, "dense-a")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tokens != 1251 || rep.RestoredBlocks+rep.RecomputedBlocks < 2 || rep.Choice == "" {
		t.Fatalf("restore report %v", rep)
	}
	if after := greedyN(t, s2, 12); !slices.Equal(before, after) {
		t.Fatalf("continuation after restart %v, before %v", after, before)
	}
	ex, err := s2.Explain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Restore.Snapshot != "dense-a" || !ex.Cold.Enabled || ex.ResidentTokens != 1251+12 {
		t.Fatalf("explain after restore: restore %v cold %v resident %d", ex.Restore, ex.Cold, ex.ResidentTokens)
	}
	// A manifest starting like the snapshot resumes a new session.
	s3, pr, err := c2.OpenSessionWith(ctx, "resumer", tokenManifest(randomTokens(1, 1100), randomTokens(2, 150), randomTokens(3, 40)))
	if err != nil {
		t.Fatal(err)
	}
	if pr.ResumedSnapshot == "" || pr.ResumedTokens < 1251 || pr.PrefilledTokens != 40 {
		t.Fatalf("cross-session resume: %+v (want 1251 tokens resumed, 40 prefilled)", pr)
	}
	_ = s3
}

func TestHotSetSnapshotRestoreIsBitExact(t *testing.T) {
	ctx := context.Background()
	ts, start := restartable(t, Config{ContextTokens: 512, HotTokens: 512, ArenaBytes: 64 << 20})
	c := dial(t, ts)
	s := openSession(t, c)
	hay := randomTokens(5, 3000)
	if _, err := s.EnsurePrefix(ctx, tokenManifest(hay)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PrefillSuffix(ctx, client.Segment{ID: "q", Kind: client.KindUserTurn, Tokens: hay[100:108]}); err != nil {
		t.Fatal(err)
	}
	checkHot(t, ts.srv)
	snap, err := s.Snapshot(ctx, "hot-a")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Tokens != 3009 {
		t.Fatalf("snapshot of %d tokens, want 3009", snap.Tokens)
	}
	before := greedyN(t, s, 16)
	c.Close()
	ts.stop()

	ts2 := start()
	c2 := dial(t, ts2)
	s2 := openSession(t, c2)
	rep, err := s2.Restore(ctx, "hot-a")
	if err != nil {
		t.Fatal(err)
	}
	checkHot(t, ts2.srv)
	if after := greedyN(t, s2, 16); !slices.Equal(before, after) {
		t.Fatalf("hot-set continuation after restart %v, before %v", after, before)
	}
	ex, err := s2.Explain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ex.ParkedBlocks == 0 || ex.HotTokens == 0 || rep.RestoredBlocks == 0 {
		t.Fatalf("restored hot session: parked blocks %d, hot tokens %d, report %v", ex.ParkedBlocks, ex.HotTokens, rep)
	}
	// A dense daemon refuses the hot-set snapshot with a typed error.
	c2.Close()
	ts2.stop()
	cfg := ts2.cfg
	cfg.HotTokens, cfg.SocketPath = 0, filepath.Join(t.TempDir(), "d.sock")
	ts3 := startServer(t, cfg)
	s3 := openSession(t, dial(t, ts3))
	if _, err := s3.Restore(ctx, "hot-a"); !errors.Is(err, client.ErrIncompatible) {
		t.Fatalf("restoring a hot-set snapshot on a dense daemon: %v, want ErrIncompatible", err)
	}
}

func TestAutomaticSnapshotOnCloseResumesNextSession(t *testing.T) {
	ctx := context.Background()
	ts, start := restartable(t, Config{ContextTokens: 1024})
	c := dial(t, ts)
	s, err := c.OpenSession(ctx, "agent/task 7")
	if err != nil {
		t.Fatal(err)
	}
	m := tokenManifest(randomTokens(9, 400))
	if _, err := s.EnsurePrefix(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	ts.stop() // waits for the automatic snapshot

	ts2 := start()
	c2 := dial(t, ts2)
	list, err := c2.Snapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sn := range list.Snapshots {
		names = append(names, sn.Name)
	}
	if !slices.Contains(names, "auto-agent_task_7") {
		t.Fatalf("snapshots %v: want auto-agent_task_7", names)
	}
	s2 := openSession(t, c2)
	pr, err := s2.EnsurePrefix(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if pr.ResumedSnapshot != "auto-agent_task_7" || pr.PrefilledTokens > 1 {
		t.Fatalf("resume after restart: %+v", pr)
	}
}

func TestCorruptSnapshotIsReportedNeverLoaded(t *testing.T) {
	ctx := context.Background()
	ts, start := restartable(t, Config{ContextTokens: 1024})
	c := dial(t, ts)
	s := openSession(t, c)
	if _, err := s.EnsurePrefix(ctx, tokenManifest(randomTokens(4, 300))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot(ctx, "victim"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	ts.stop()
	// Flip a byte in the middle of every block file.
	cold := filepath.Join(ts.cfg.DataDir, "cold")
	var flipped int
	filepath.WalkDir(cold, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".blk") {
			return nil
		}
		b, _ := os.ReadFile(p)
		b[len(b)/2] ^= 0x5a
		os.WriteFile(p, b, 0o600)
		flipped++
		return nil
	})
	if flipped == 0 {
		t.Fatal("no block files found under " + cold)
	}
	ts2 := start()
	c2 := dial(t, ts2)
	v, err := c2.VerifyCold(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s2 := openSession(t, c2)
	_, rerr := s2.Restore(ctx, "victim")
	if rerr == nil {
		// A restore may only succeed by recomputing what it could not read.
		ex, _ := s2.Explain(ctx)
		if ex.Restore.RecomputedTokens == 0 {
			t.Fatalf("corrupt blocks restored without recompute: %v", ex.Restore)
		}
	}
	if len(v.Problems) == 0 && rerr == nil {
		t.Fatal("corruption neither reported by verify nor by restore")
	}
	// The session works either way.
	if _, err := s2.EnsurePrefix(ctx, tokenManifest(randomTokens(4, 300))); err != nil {
		t.Fatal(err)
	}
	greedyN(t, s2, 4)
}

func TestSSDTierOffSessionsKeepRunning(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	blocker := filepath.Join(dir, "not-a-dir")
	os.WriteFile(blocker, []byte("x"), 0o600)
	ts := startServer(t, Config{ContextTokens: 1024, ColdDir: filepath.Join(blocker, "cold")})
	c := dial(t, ts)
	s := openSession(t, c)
	if _, err := s.EnsurePrefix(ctx, tokenManifest(randomTokens(4, 200))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot(ctx, "x"); !errors.Is(err, client.ErrResourceExhausted) {
		t.Fatalf("snapshot without an SSD tier: %v, want ErrResourceExhausted", err)
	}
	ex, err := s.Explain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Cold.Enabled || ex.Cold.Unavailable == "" {
		t.Fatalf("explain cold %v: want disabled with a reason", ex.Cold)
	}
	greedyN(t, s, 4)
}

func TestReportEditAndTurnExpiry(t *testing.T) {
	ctx := context.Background()
	ts := startServer(t, Config{ContextTokens: 2048, NoCold: true})
	c := dial(t, ts)
	s := openSession(t, c)
	m := client.Manifest{Segments: []client.Segment{
		{ID: "sys", Kind: client.KindSystem, Stable: true, Tokens: randomTokens(1, 100)},
		{ID: "file", Kind: client.KindRepoMap, Stable: true, InvalidateOnEdit: true, Paths: []string{"pkg/a.go"}, Tokens: randomTokens(2, 100)},
		{ID: "rules", Kind: client.KindRepoRules, Stable: true, Tokens: randomTokens(3, 50)},
		{ID: "term", Kind: client.KindTerminal, InvalidateOnTurn: true, Tokens: randomTokens(4, 30)},
		{ID: "ask", Kind: client.KindUserTurn, Tokens: randomTokens(5, 10)},
	}}
	if _, err := s.EnsurePrefix(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PrefillSuffix(ctx); err != nil {
		t.Fatal(err)
	}
	greedyN(t, s, 4)
	// on_turn: the same prompt again reuses nothing from "term" on.
	if _, err := s.EnsurePrefix(ctx, m); err != nil {
		t.Fatal(err)
	}
	pr, err := s.PrefillSuffix(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pr.ReusedTokens != 0 || pr.PrefilledTokens != 40 {
		t.Fatalf("after the turn ended, suffix %+v: want the 40 suffix tokens prefilled again", pr)
	}
	// on_edit: an unrelated path changes nothing; pkg/a.go cuts at "file".
	if r, err := s.ReportEdit(ctx, "pkg/b.go"); err != nil || r.Sessions != 0 {
		t.Fatalf("unrelated edit: %+v %v", r, err)
	}
	r, err := s.ReportEdit(ctx, "./pkg/a.go")
	if err != nil {
		t.Fatal(err)
	}
	if r.Sessions != 1 || !slices.Equal(r.Segments, []string{"file"}) || r.DroppedTokens != 1+100+100+50+40-101 {
		t.Fatalf("edit report %+v", r)
	}
	ex, err := s.Explain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ex.ResidentTokens != 101 {
		t.Fatalf("after the edit %d tokens resident, want 101 (BOS + sys)", ex.ResidentTokens)
	}
	pr, err = s.EnsurePrefix(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if pr.ReusedTokens != 101 || pr.PrefilledTokens != 150 {
		t.Fatalf("after the edit: %+v, want 101 reused and 150 prefilled", pr)
	}
}

func TestArenaResumeAfterCloseAndRestart(t *testing.T) {
	ctx := context.Background()
	// No SSD tier: what comes back comes from the host-RAM arena.
	ts, start := restartable(t, Config{ContextTokens: 512, HotTokens: 512, ArenaBytes: 64 << 20, NoCold: true})
	c := dial(t, ts)
	hay := randomTokens(11, 3000)
	s := openSession(t, c)
	if _, err := s.EnsurePrefix(ctx, tokenManifest(hay)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Same run: a new session adopts the closed session's parked blocks.
	s2 := openSession(t, c)
	pr, err := s2.EnsurePrefix(ctx, tokenManifest(hay, randomTokens(12, 100)))
	if err != nil {
		t.Fatal(err)
	}
	if pr.ResumedSnapshot != "arena" || pr.PrefilledTokens > 100+64 {
		t.Fatalf("resume from a closed session's blocks: %+v", pr)
	}
	checkHot(t, ts.srv)
	greedyN(t, s2, 4)
	c.Close()
	ts.stop()

	// A restarted ctxd re-attaches the arena and resumes from it.
	ts2 := start()
	c2 := dial(t, ts2)
	s3 := openSession(t, c2)
	pr, err = s3.EnsurePrefix(ctx, tokenManifest(hay, randomTokens(12, 100), randomTokens(13, 50)))
	if err != nil {
		t.Fatal(err)
	}
	if pr.ResumedSnapshot != "arena" || pr.ResumedTokens < 3000 || pr.PrefilledTokens > 50+64+4 {
		t.Fatalf("resume after restart: %+v", pr)
	}
	checkHot(t, ts2.srv)
	ex, err := s3.Explain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ex.ParkedBlocks < 40 || ex.HotTokens == 0 {
		t.Fatalf("after the arena resume: %d parked blocks, %d hot tokens", ex.ParkedBlocks, ex.HotTokens)
	}
	greedyN(t, s3, 4)
}

func TestProgressEventsForLongCalls(t *testing.T) {
	ctx := context.Background()
	ts := startServer(t, Config{ContextTokens: 4096, IdleSnapshot: -1})
	c := dial(t, ts)
	s := openSession(t, c)
	var got []client.Progress
	pctx := client.WithProgress(ctx, func(p client.Progress) { got = append(got, p) })
	if _, err := s.EnsurePrefix(pctx, tokenManifest(randomTokens(21, 3000))); err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || got[len(got)-1] != (client.Progress{Phase: "prefill", Done: 3001, Total: 3001}) {
		t.Fatalf("prefill progress %v: want it to end at 3001 of 3001", got)
	}
	if _, err := s.Snapshot(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	s2 := openSession(t, c)
	got = nil
	if _, err := s2.Restore(pctx, "p"); err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || got[len(got)-1].Phase != "restore" {
		t.Fatalf("restore progress %v", got)
	}
	// Without WithProgress no event arrives and nothing changes.
	got = nil
	if _, err := s.EnsurePrefix(ctx, tokenManifest(randomTokens(21, 3000), randomTokens(22, 100))); err != nil || len(got) != 0 {
		t.Fatalf("plain call: %v, %d progress events", err, len(got))
	}
}

// TestFullDiskSSDTierStandsAside runs the SSD tier on a real 1 MiB tmpfs:
// a snapshot that does not fit fails with a typed error, the tier says why,
// and the session keeps working on host RAM.
func TestFullDiskSSDTierStandsAside(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a 1 MiB tmpfs here: %v: %s", err, out)
	}
	// A quota above the disk size: the disk fills before the quota does.
	ts := startServer(t, Config{ContextTokens: 4096, IdleSnapshot: -1, ColdDir: filepath.Join(mnt, "cold"), ColdQuotaBytes: 64 << 20})
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	ctx := context.Background()
	c := dial(t, ts)
	s := openSession(t, c)
	if _, err := s.EnsurePrefix(ctx, tokenManifest(randomTokens(31, 3500))); err != nil {
		t.Fatal(err)
	}
	// 3,501 tokens × 640 bytes ≈ 2.2 MB of KV: more than the disk holds.
	_, snapErr := s.Snapshot(ctx, "too-big")
	if !errors.Is(snapErr, client.ErrResourceExhausted) || !strings.Contains(snapErr.Error(), "no space left") {
		t.Fatalf("snapshot on a full disk: %v, want ErrResourceExhausted naming the full disk", snapErr)
	}
	ex, err := s.Explain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Cold.Failed == 0 && ex.Cold.Unavailable == "" {
		t.Fatalf("the SSD tier does not report the failure: %v", ex.Cold)
	}
	// The session keeps running on host RAM.
	if _, err := s.EnsurePrefix(ctx, tokenManifest(randomTokens(31, 3500), randomTokens(32, 50))); err != nil {
		t.Fatal(err)
	}
	if toks := greedyN(t, s, 4); len(toks) != 4 {
		t.Fatalf("decode after the disk filled: %v", toks)
	}
	t.Logf("snapshot error: %v; cold: %v", snapErr, ex.Cold)
}

func TestIdleSessionIsSnapshotted(t *testing.T) {
	ctx := context.Background()
	ts := startServer(t, Config{ContextTokens: 1024, IdleSnapshot: 300 * time.Millisecond})
	c := dial(t, ts)
	s, err := c.OpenSession(ctx, "idler")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnsurePrefix(ctx, tokenManifest(randomTokens(41, 200))); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, err := c.Snapshots(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, sn := range list.Snapshots {
			if sn.Name == "auto-idler" && sn.Tokens == 201 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no automatic snapshot of the idle session: %v", list.Snapshots)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
