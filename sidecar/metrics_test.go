package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/protocol"
)

// TestMetricsMoveWithRealOperations drives a hot-set daemon through a
// needle trial and checks that every counter and timing moved by what the
// trial did, as Explain and the replies report it.
func TestMetricsMoveWithRealOperations(t *testing.T) {
	ts := needleServer(t, Config{})
	c := dial(t, ts)
	ctx := context.Background()

	m0, err := c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m0.PID != os.Getpid() || m0.Executable == "" {
		t.Fatalf("pid %d exe %q", m0.PID, m0.Executable)
	}
	for _, name := range []string{"ctxd_hot_evictions_total", "ctxd_decoded_tokens_total", "ctxd_sessions", "ctxd_arena_budget_bytes"} {
		if _, ok := m0.Values[name]; !ok {
			t.Errorf("%s not registered; values: %v", name, m0.Values)
		}
	}

	rng := rand.New(rand.NewSource(11))
	hay, needle := haystack(rng, 1500)
	_, s := recall(t, c, hay, needle)
	ex, err := s.Explain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Evictions == 0 || ex.Admissions == 0 {
		t.Fatalf("the trial should evict and admit: %d / %d", ex.Evictions, ex.Admissions)
	}
	// An unknown session: one error, counted by method and code.
	if _, err := c.Explain(ctx, 987654); !errors.Is(err, protocol.ErrNotFound) {
		t.Fatalf("explain of an unknown session: %v", err)
	}

	m, err := c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v := m.Values
	want := map[string]float64{
		"ctxd_hot_evictions_total":                                     float64(ex.Evictions),
		"ctxd_hot_admissions_total":                                    float64(ex.Admissions),
		`ctxd_prefilled_tokens_total{call="ensure_prefix"}`:            float64(len(hay) + 1),
		`ctxd_prompt_tokens_total{call="ensure_prefix"}`:               float64(len(hay) + 1),
		`ctxd_prefilled_tokens_total{call="prefill_suffix"}`:           4,
		"ctxd_decoded_tokens_total":                                    20,
		"ctxd_sessions":                                                1,
		`ctxd_request_errors_total{code="not_found",method="explain"}`: 1,
	}
	for k, w := range want {
		if got, ok := v[k]; !ok || got != w {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, w)
		}
	}
	parked := v["ctxd_arena_blocks_parked_total"]
	if parked < float64(len(hay)/64-4) || v["ctxd_arena_blocks"] == 0 || v["ctxd_arena_used_bytes"] == 0 || v["ctxd_arena_kv_bytes"] == 0 {
		t.Errorf("arena: parked %v, blocks %v, used %v, kv %v", parked, v["ctxd_arena_blocks"], v["ctxd_arena_used_bytes"], v["ctxd_arena_kv_bytes"])
	}
	hist := map[string]uint64{}
	for _, h := range m.Histograms {
		hist[h.Name] = h.Count
		var sum uint64
		for _, b := range h.Buckets {
			sum += b
		}
		if sum != h.Count || len(h.Buckets) != 64 {
			t.Errorf("%s: buckets hold %d of %d observations (%d buckets)", h.Name, sum, h.Count, len(h.Buckets))
		}
	}
	adm := uint64(ex.Admissions)
	for name, n := range map[string]uint64{
		"fetch_phase.arena_lookup": adm, "fetch_phase.engine_insert": adm, "fetch.arena": adm,
		"fetch_phase.decompress": 0, "request.ensure_prefix": 1, "request.prefill_suffix": 1, "request.decode": 1,
		"request.metrics": 1, "cold_read": 0, "cold_write": 0,
	} {
		if got, ok := hist[name]; !ok || got != n {
			t.Errorf("timing %s: %d observations (present %v), want %d", name, got, ok, n)
		}
	}
	if len(m.ArenaRanges) == 0 {
		t.Fatal("no arena ranges")
	}
	for _, r := range m.ArenaRanges {
		if r.Start == 0 || r.End <= r.Start || !strings.HasSuffix(r.Path, ".shm") {
			t.Errorf("arena range %v", r)
		}
	}
	for _, line := range []string{"# TYPE ctxd_hot_evictions_total counter", "ctxd_fetch_phase_seconds_bucket{phase=\"arena_lookup\",le=", "go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(m.PrometheusText, line) {
			t.Errorf("exposition lacks %q", line)
		}
	}
	if noText, err := c.Metrics(ctx, client.MetricsOptions{NoText: true}); err != nil || noText.PrometheusText != "" || len(noText.Histograms) == 0 {
		t.Fatalf("no_text: %v, %d bytes of text", err, len(noText.PrometheusText))
	}
	checkHot(t, ts.srv)
}

// TestMetricsHTTPListener serves /metrics at Config.MetricsAddr and
// refuses an address it cannot bind.
func TestMetricsHTTPListener(t *testing.T) {
	ts := startServer(t, Config{MetricsAddr: "127.0.0.1:0"})
	c := dial(t, ts)
	turn := runTurn(t, openSession(t, c), manifest("One day, Lily found a ball."), 2)
	var addr string
	for deadline := time.Now().Add(5 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		addr = ts.srv.MetricsListenAddr()
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `ctxd_prefilled_tokens_total{call="ensure_prefix"}`) ||
		!strings.Contains(string(body), fmt.Sprintf("ctxd_decoded_tokens_total %d\n", len(turn.tokens))) {
		t.Fatalf("GET /metrics: %d\n%s", resp.StatusCode, body)
	}

	// A taken port: Serve fails with ErrConfig naming the address.
	dir := t.TempDir()
	cfg := Config{Engine: llama.Backend{}, SocketPath: filepath.Join(dir, "s.sock"), DataDir: filepath.Join(dir, "d"), MetricsAddr: addr,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ln, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	err = srv.Serve(context.Background(), ln)
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Serve with a taken metrics port: %v", err)
	}
}

// TestTimingHistogramConversion: Prometheus buckets at powers of two
// nanoseconds map one to one onto log2 buckets.
func TestTimingHistogramConversion(t *testing.T) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ctxd_x_seconds", Buckets: timingBuckets()})
	obs := []time.Duration{50, 300, 1500, 1500, 3 * time.Millisecond, 100 * time.Second}
	for _, d := range obs {
		h.Observe(d.Seconds())
	}
	var mt dto.Metric
	if err := h.Write(&mt); err != nil {
		t.Fatal(err)
	}
	w := timingHistogram("ctxd_x_seconds", &mt)
	if w.GetName() != "x" || w.GetCount() != uint64(len(obs)) {
		t.Fatalf("%s: %d", w.GetName(), w.GetCount())
	}
	want := map[int]uint64{
		7:  1, // 50 ns: below the first bound (256 ns), counted in bucket 7
		8:  1, // 300 ns in [256, 512)
		10: 2, // 1.5 µs in [1024, 2048)
		21: 1, // 3 ms in [2^21, 2^22) ns
		35: 1, // 100 s: above the last bound (2^35 ns ≈ 34 s)
	}
	for k, n := range w.GetBuckets() {
		if n != want[k] {
			t.Errorf("bucket %d: %d, want %d", k, n, want[k])
		}
	}
	if got := TimingHistogramName("ctxd_fetch_phase_seconds", "decompress"); got != "fetch_phase.decompress" {
		t.Fatal(got)
	}
}
