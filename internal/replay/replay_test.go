package replay

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/internal/trace"
	"github.com/ctxd/ctxd/sidecar"
)

func start(t *testing.T, ctxTokens int) *client.Client {
	t.Helper()
	p, err := sidecar.StartPrivate(sidecar.Config{Engine: llama.Backend{}, ModelPath: testmodel.Stories(t), ContextTokens: ctxTokens})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	c, err := client.Dial(context.Background(), p.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// smallTrace writes a SWE-agent-shaped trajectory short enough for 2k
// tokens of dense attention.
func smallTrace(t *testing.T) *trace.Trajectory {
	t.Helper()
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	h := []msg{
		{"system", "You are a helpful agent. You fix bugs in small Python projects."},
		{"user", "The function add in math.py returns the wrong sum. Fix it."},
		{"assistant", "Let me look at the file. open math.py"},
		{"user", "def add(a, b):\n    return a - b\n"},
		{"assistant", "The sign is wrong. edit 2:2\n    return a + b\nend_of_edit"},
		{"user", "File updated. def add(a, b):\n    return a + b\n"},
		{"assistant", "Now run the tests. python -m pytest"},
		{"user", "3 passed in 0.01s"},
		{"assistant", "submit"},
	}
	b, _ := json.Marshal(map[string]any{"history": h})
	p := filepath.Join(t.TempDir(), "small.traj")
	os.WriteFile(p, b, 0o600)
	tr, err := trace.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestReplayReusesEverythingAndMatchesCold(t *testing.T) {
	c := start(t, 2048)
	rep, err := Run(context.Background(), c, smallTrace(t), Options{DecodeTokens: 4, VerifyCold: true})
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Summary
	if s.Turns != 4 || s.OverflowAtTurn != 0 {
		t.Fatalf("summary %+v", s)
	}
	if s.ReuseRatio < 0.99 || !*s.ColdMatchAll || s.PromptReuse < 0.5 {
		t.Fatalf("reuse %.3f prompt_reuse %.3f cold_match_all %v", s.ReuseRatio, s.PromptReuse, *s.ColdMatchAll)
	}
	for i, turn := range rep.Turns {
		if turn.ReusedTokens+turn.PrefilledTokens != turn.PromptTokens {
			t.Fatalf("turn %d: reused %d + prefilled %d != prompt %d", i+1, turn.ReusedTokens, turn.PrefilledTokens, turn.PromptTokens)
		}
		if i > 0 && turn.ReusableTokens < rep.Turns[i-1].PromptTokens {
			t.Fatalf("turn %d: reusable %d < previous prompt %d", i+1, turn.ReusableTokens, rep.Turns[i-1].PromptTokens)
		}
		if len(turn.Tokens) != 4 || turn.ColdLatencyMS == nil {
			t.Fatalf("turn %d: %+v", i+1, turn)
		}
	}
}

// TestReplayReportsOverflowNeverTruncates: the real traces start beyond 2k
// tokens; replay stops at turn 1 with the numbers.
func TestReplayReportsOverflowNeverTruncates(t *testing.T) {
	c := start(t, 2048)
	tr, err := trace.Load(filepath.Join(testmodel.Traces(t), "test-repo-i1.traj"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), c, tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Summary
	if s.OverflowAtTurn != 1 || s.Overflow == nil || s.Overflow.ContextTokens != 2048 || s.Overflow.PromptTokens <= 2048 || len(rep.Turns) != 0 {
		t.Fatalf("summary %+v overflow %+v", s, s.Overflow)
	}
}
