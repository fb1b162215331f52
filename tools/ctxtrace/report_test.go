package ctxtrace

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sampleReport() Report {
	var a, b Hist
	a.Name, a.What = "pread64", "pread64(2) latency"
	for i := 0; i < 50; i++ {
		a.Add(3000 + uint64(i))
	}
	a.Add(2_000_000)
	b.Name = "fsync"
	return Report{Source: SourceEBPF, PID: 42, DurationS: 1.5, Probes: []ProbeReport{ProbeReportOf(a), ProbeReportOf(b)}}
}

func TestReportJSONShape(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleReport().WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Probes []map[string]any `json:"probes"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Probes) != 2 {
		t.Fatalf("probes: %v", got.Probes)
	}
	for _, key := range []string{"name", "count", "p50_us", "p99_us", "buckets"} {
		if _, ok := got.Probes[0][key]; !ok {
			t.Errorf("probe JSON lacks %q: %v", key, got.Probes[0])
		}
	}
	if got.Probes[0]["count"].(float64) != 51 || len(got.Probes[1]["buckets"].([]any)) != 0 {
		t.Fatalf("probes: %v", got.Probes)
	}
}

func TestReportTextAndPNG(t *testing.T) {
	r := sampleReport()
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	// The pread64 chart spans its buckets (2.05µs … 2.1ms), empty ones
	// included; fsync had no events.
	for _, want := range []string{"pread64 — pread64(2) latency", "count 51", "2.05µs -> 4.1µs", "1.05ms -> 2.1ms", "no events: fsync"} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "|\n"); n != Bucket(2_000_000)-Bucket(3000)+1 {
		t.Errorf("%d bar lines, want one per bucket from %d to %d:\n%s", n, Bucket(3000), Bucket(2_000_000), out)
	}
	png := filepath.Join(t.TempDir(), "h.png")
	if err := r.WritePNG(png); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("PNG: %v", err)
	}
	if err := (Report{Probes: []ProbeReport{ProbeReportOf(Hist{Name: "x"})}}).WritePNG(png); err == nil {
		t.Fatal("plotting only empty histograms should fail")
	}
}
