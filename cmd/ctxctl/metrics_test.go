package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/sidecar"
)

func TestMetricsCommand(t *testing.T) {
	p, err := sidecar.StartPrivate(sidecar.Config{Engine: llama.Backend{}, ModelPath: testmodel.Stories(t), ContextTokens: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if code, _, errs := ctl(t, "--socket", p.Socket, "generate", "--prompt", "Once upon a time", "--max-tokens", "5"); code != 0 {
		t.Fatalf("generate: %d %s", code, errs)
	}
	code, out, errs := ctl(t, "--socket", p.Socket, "metrics")
	if code != 0 || !strings.Contains(out, "# TYPE ctxd_decoded_tokens_total counter\nctxd_decoded_tokens_total 5\n") {
		t.Fatalf("metrics: %d %s\n%s", code, errs, out)
	}
	code, out, errs = ctl(t, "--socket", p.Socket, "metrics", "--json")
	var m struct {
		PID     int                `json:"pid"`
		Values  map[string]float64 `json:"values"`
		Timings []struct {
			Name  string  `json:"name"`
			Count uint64  `json:"count"`
			P50us float64 `json:"p50_us"`
			P99us float64 `json:"p99_us"`
		} `json:"timings"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &m) != nil {
		t.Fatalf("metrics --json: %d %s\n%s", code, errs, out)
	}
	if m.Values["ctxd_decoded_tokens_total"] != 5 || m.Values[`ctxd_prompt_tokens_total{call="ensure_prefix"}`] == 0 {
		t.Fatalf("values: %v", m.Values)
	}
	found := false
	for _, tm := range m.Timings {
		if tm.Name == "request.decode" {
			found = tm.Count == 1 && tm.P50us > 0 && tm.P99us >= tm.P50us
		}
	}
	if !found {
		t.Fatalf("no request.decode timing with percentiles: %+v", m.Timings)
	}
	if code, _, _ := ctl(t, "--socket", p.Socket, "metrics", "extra"); code != 2 {
		t.Fatalf("an extra argument must be a usage error, got %d", code)
	}
}
