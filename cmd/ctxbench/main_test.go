package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/internal/testmodel"
)

func ctl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsageAndUnknownCommands(t *testing.T) {
	if code, _, _ := ctl(t, "frobnicate"); code != 2 {
		t.Fatalf("unknown command: %d", code)
	}
	if code, _, _ := ctl(t, "bench"); code != 2 {
		t.Fatalf("bench without a benchmark: %d", code)
	}
	if code, _, _ := ctl(t, "gen-model"); code != 2 {
		t.Fatalf("gen-model without --out: %d", code)
	}
	// The operator's commands are in ctxctl.
	if code, _, errs := ctl(t, "status"); code != 2 || !strings.Contains(errs, "ctxctl") {
		t.Fatalf("status: %d %s", code, errs)
	}
}

func TestBenchReplayJSONWithPrivateDaemon(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.traj")
	os.WriteFile(tr, []byte(`{"history": [
		{"role": "system", "content": "You are an agent."},
		{"role": "user", "content": "Fix the bug in add."},
		{"role": "assistant", "content": "open math.py"},
		{"role": "user", "content": "def add(a, b): return a - b"},
		{"role": "assistant", "content": "edit the sign"}]}`), 0o600)
	code, out, errs := ctl(t, "bench", "replay", "--traces", dir, "--model", testmodel.Stories(t), "--ctx", "512", "--json")
	if code != 0 {
		t.Fatalf("bench replay: %d %s", code, errs)
	}
	var rep struct {
		Traces []struct {
			Trace   string `json:"trace"`
			Summary struct {
				ReuseRatio    float64  `json:"reuse_ratio"`
				PromptReuse   float64  `json:"prompt_reuse"`
				WarmColdRatio *float64 `json:"warm_cold_ratio"`
			} `json:"summary"`
		} `json:"traces"`
		Total struct {
			ColdMatchAll bool `json:"cold_match_all"`
		} `json:"total"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(rep.Traces) != 1 || rep.Traces[0].Summary.ReuseRatio < 0.99 || rep.Traces[0].Summary.WarmColdRatio == nil || !rep.Total.ColdMatchAll {
		t.Fatalf("report: %s", out)
	}
}

func TestEvalRecallAndScale(t *testing.T) {
	code, out, errs := ctl(t, "eval", "recall", "--model", testmodel.Needle(t), "--distance-windows", "4", "--trials", "3", "--dense=false", "--json")
	if code != 0 {
		t.Fatalf("eval recall: %d %s", code, errs)
	}
	var rec struct {
		Baseline    float64 `json:"baseline_acc"`
		SinksRecent float64 `json:"sinks_recent_acc"`
		Retrieval   float64 `json:"retrieval_acc"`
		HitRate     float64 `json:"retrieval_hit_rate"`
	}
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Baseline < 0.9 || rec.Retrieval < 0.9*rec.Baseline || rec.SinksRecent > 0.3 || rec.HitRate < 1 {
		t.Fatalf("recall: %s", out)
	}
	code, out, errs = ctl(t, "eval", "scale", "--model", testmodel.Stories(t), "--traces", testmodel.Traces(t), "--tokens", "3000", "--turns", "1", "--json")
	if code != 0 {
		t.Fatalf("eval scale: %d %s", code, errs)
	}
	var sc struct {
		Build     float64 `json:"cold_build_s"`
		Turn      float64 `json:"turn_ms_200k"`
		Evictions int64   `json:"evictions"`
	}
	if err := json.Unmarshal([]byte(out), &sc); err != nil || sc.Build <= 0 || sc.Turn <= 0 || sc.Evictions == 0 {
		t.Fatalf("scale: %s %v", out, err)
	}
}

func TestEvalPPL(t *testing.T) {
	png := filepath.Join(t.TempDir(), "ppl.png")
	code, out, errs := ctl(t, "eval", "ppl", "--model", testmodel.Stories(t), "--traces", testmodel.Traces(t),
		"--tokens", "1500", "--dense-max", "1000", "--png", png, "--json")
	if code != 0 {
		t.Fatalf("eval ppl: %d %s", code, errs)
	}
	var res struct {
		Curves []struct {
			Name     string  `json:"name"`
			InWindow float64 `json:"ppl_in_window"`
		} `json:"curves"`
		Ratio float64 `json:"ctxd_last_over_in_window"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Curves) != 5 || res.Ratio <= 0 {
		t.Fatalf("ppl: %s %v", out, err)
	}
	for _, c := range res.Curves {
		if c.InWindow < 1 || c.InWindow > 512 {
			t.Fatalf("%s: in-window perplexity %v", c.Name, c.InWindow)
		}
	}
	if st, err := os.Stat(png); err != nil || st.Size() < 1000 {
		t.Fatalf("plot: %v", err)
	}
}
