package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxd/ctxd/internal/testmodel"
)

// TestBenchHTTPReplaysAgentSession replays one recorded opencode session
// (a title side request, then three main turns) through the HTTP API: from
// the 2nd main request on, the KV of ≥ 0.9 of the previous prompt is reused.
func TestBenchHTTPReplaysAgentSession(t *testing.T) {
	root, err := testmodel.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := envOr("CTXD_AGENT_REQUESTS", filepath.Join(root, "..", "shared", "agent-requests"))
	if _, err := os.Stat(filepath.Join(dir, "opencode", "1.json")); err != nil {
		t.Fatalf("recorded agent requests missing: %v", err)
	}
	code, out, errs := ctl(t, "--no-progress", "bench", "http", "--model", testmodel.Stories(t), "--requests", dir,
		"--session", "opencode", "--reps", "0", "--no-main-only", "--json")
	if code != 0 {
		t.Fatalf("bench http: %d %s", code, errs)
	}
	var res struct {
		Sessions []httpReplaySession `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Sessions) != 1 {
		t.Fatalf("output: %v %s", err, out)
	}
	s := res.Sessions[0]
	mains := 0
	for _, r := range s.Requests {
		t.Logf("request %d side=%v session %s prompt %d cached %d approx %d reuse %.3f ttfb %.1f ms ttft %.1f ms", r.N, r.Side, r.Session, r.PromptTokens, r.CachedTokens, r.ApproxTokens, r.ReuseOfPrevious, r.TTFBMS, r.TTFTMS)
		if r.TTFTMS < r.TTFBMS || r.TTFTMS > r.TotalMS {
			t.Errorf("request %d: ttft %.1f ms outside [ttfb %.1f, total %.1f]", r.N, r.TTFTMS, r.TTFBMS, r.TotalMS)
		}
		if !r.Side {
			if mains > 0 && r.ReuseOfPrevious < 0.9 {
				t.Errorf("main request %d reused %.3f of the previous prompt", r.N, r.ReuseOfPrevious)
			}
			mains++
		}
	}
	if mains != 3 || s.Sides != 1 {
		t.Errorf("%d main and %d side requests, want 3 and 1 (opencode's title request)", mains, s.Sides)
	}
}
