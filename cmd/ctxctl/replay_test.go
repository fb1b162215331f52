package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/sidecar"
)

func TestReplayJSONAgainstADaemon(t *testing.T) {
	tr := filepath.Join(t.TempDir(), "t.traj")
	os.WriteFile(tr, []byte(`{"history": [
		{"role": "system", "content": "You are an agent."},
		{"role": "user", "content": "Fix the bug in add."},
		{"role": "assistant", "content": "open math.py"},
		{"role": "user", "content": "def add(a, b): return a - b"},
		{"role": "assistant", "content": "edit the sign"}]}`), 0o600)
	p, err := sidecar.StartPrivate(sidecar.Config{Engine: llama.Backend{}, ModelPath: testmodel.Stories(t), ContextTokens: 512, NoCold: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	code, out, errs := ctl(t, "--socket", p.Socket, "replay", "--trace", tr, "--json", "--verify-cold")
	if code != 0 {
		t.Fatalf("replay: %d %s", code, errs)
	}
	var rep struct {
		Turns []struct {
			PromptTokens int   `json:"prompt_tokens"`
			ColdMatch    *bool `json:"cold_match"`
		} `json:"turns"`
		Summary struct {
			ReuseRatio    float64  `json:"reuse_ratio"`
			PromptReuse   float64  `json:"prompt_reuse"`
			WarmColdRatio *float64 `json:"warm_cold_ratio"`
		} `json:"summary"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(rep.Turns) != 2 || rep.Summary.ReuseRatio < 0.99 || rep.Summary.WarmColdRatio == nil || !*rep.Turns[1].ColdMatch {
		t.Fatalf("report: %s", out)
	}
}
