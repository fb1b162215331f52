package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxd/ctxd/internal/testmodel"
)

// TestEvalBoundOnRecordedRequests (stories260K): opencode's recorded
// sub-agent session and a date change, an AGENTS.md block and a synthetic
// sub-agent made from it: every request prefills at most new + recompute
// budget + 1 tokens, and the recorded sub-agent, which opens a session of
// its own, reuses most of its prompt from the main session; in dense
// sessions and in the hot set (the daemon's default layout), where the
// bound holds token by token too.
func TestEvalBoundOnRecordedRequests(t *testing.T) {
	root, err := testmodel.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := envOr("CTXD_AGENT_REQUESTS", filepath.Join(root, "..", "shared", "agent-requests"))
	if _, err := os.Stat(filepath.Join(dir, "opencode_task", "1.json")); err != nil {
		t.Fatalf("recorded agent requests missing: %v", err)
	}
	for _, layout := range []string{"dense", "hot"} {
		t.Run(layout, func(t *testing.T) {
			args := []string{"--no-progress", "eval", "bound", "--model", testmodel.Stories(t), "--requests", dir,
				"--sessions", "opencode_task", "--max-tools", "1", "--max-message-chars", "1000", "--perturb", "date,agents,subagent", "--json"}
			if layout == "hot" {
				args = append(args, "--hot")
			}
			checkBound(t, args)
		})
	}
}

// checkBound runs eval bound with args and checks every row.
func checkBound(t *testing.T, args []string) {
	code, out, errs := ctl(t, args...)
	if code != 0 {
		t.Fatalf("eval bound: %d %s %s", code, out, errs)
	}
	var res boundResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output: %v %s", err, out)
	}
	subAgent := false
	for _, r := range res.Rows {
		t.Logf("%-26s %s prompt %5d new %5d prefilled %5d budget %d exact %5d approx %5d recomputed %d pass %v", r.Source, r.Session, r.Prompt, r.New, r.Prefilled, r.Budget, r.Exact, r.Approx, r.Recomputed, r.Pass)
		if !r.Pass || r.Prefilled > r.New+r.Budget+1 {
			t.Errorf("%s: prefilled %d > new %d + budget %d + 1", r.Source, r.Prefilled, r.New, r.Budget)
		}
		if r.Exact+r.Approx+r.Prefilled != r.Prompt {
			t.Errorf("%s: exact %d + approximate %d + prefilled %d != prompt %d", r.Source, r.Exact, r.Approx, r.Prefilled, r.Prompt)
		}
		if r.Source == "opencode_task/3" {
			subAgent = true
			if r.Session == res.Rows[1].Session || r.Exact+r.Approx < r.Prompt*9/10 {
				t.Errorf("recorded sub-agent: session %s, reused %d of %d", r.Session, r.Exact+r.Approx, r.Prompt)
			}
		}
	}
	if len(res.Rows) != 9 || !subAgent || res.Failed != 0 {
		t.Fatalf("%d rows, %d failed; sub-agent seen %v", len(res.Rows), res.Failed, subAgent)
	}
}
