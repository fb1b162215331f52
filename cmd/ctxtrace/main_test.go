package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/sidecar"
	"github.com/ctxd/ctxd/tools/ctxtrace"
)

func trace(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func startDaemon(t *testing.T) *sidecar.Private {
	t.Helper()
	p, err := sidecar.StartPrivate(sidecar.Config{Engine: llama.Backend{}, ModelPath: testmodel.Stories(t), ContextTokens: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

func TestUsageErrors(t *testing.T) {
	if code, _, errs := trace(t, "--bogus"); code != 2 || !strings.Contains(errs, "usage: ctxtrace") {
		t.Fatalf("unknown flag: %d %s", code, errs)
	}
	if code, _, errs := trace(t, "--pid", "-3"); code != 2 || !strings.Contains(errs, "must not be negative") {
		t.Fatalf("negative pid: %d %s", code, errs)
	}
	if code, _, errs := trace(t, "--pid", "1", "--go-side", "--duration", "1ms"); code != 1 || !strings.Contains(errs, "need --socket") {
		t.Fatalf("go-side without a socket: %d %s", code, errs)
	}
	if code, _, errs := trace(t, "--socket", filepath.Join(t.TempDir(), "none.sock"), "--duration", "1ms"); code != 1 || !strings.Contains(errs, "none.sock") {
		t.Fatalf("no daemon: %d %s", code, errs)
	}
}

// TestGoSideJSONAndPNG: the Go-side report of an idle window holds every
// timing ctxd keeps (the tracer's own first Metrics call falls inside it).
func TestGoSideJSONAndPNG(t *testing.T) {
	p := startDaemon(t)
	png := filepath.Join(t.TempDir(), "trace.png")
	code, out, errs := trace(t, "--socket", p.Socket, "--go-side", "--duration", "200ms", "--json", "--png", png)
	if code != 0 {
		t.Fatalf("%d %s", code, errs)
	}
	var r ctxtrace.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r.Source != ctxtrace.SourceGoSide || r.PID != os.Getpid() || r.DurationS < 0.2 {
		t.Fatalf("report %+v", r)
	}
	for _, name := range []string{"fetch_phase.arena_lookup", "fetch_phase.decompress", "fetch_phase.engine_insert", "cold_read", "cold_write"} {
		if _, ok := r.Probe(name); !ok {
			t.Errorf("no %s in %s", name, out)
		}
	}
	if m, ok := r.Probe("request.metrics"); !ok || m.Count != 1 {
		t.Errorf("request.metrics: %+v", m)
	}
	if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("png: %v", err)
	}
}

// TestWithoutPrivilegesSaysWhatIsMissing runs the real binary without
// capabilities: it names the missing ones and falls back to the Go-side
// timings.
func TestWithoutPrivilegesSaysWhatIsMissing(t *testing.T) {
	caps, err := ctxtrace.EffectiveCapabilities()
	if err != nil {
		t.Fatal(err)
	}
	var prefix []string
	if len(ctxtrace.MissingCapabilities(caps)) == 0 {
		sp, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("this process has the eBPF capabilities and setpriv (util-linux) is not installed to drop them")
		}
		prefix = []string{sp, "--bounding-set=-all", "--inh-caps=-all", "--"}
	}
	bin := filepath.Join(t.TempDir(), "ctxtrace")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	p := startDaemon(t)
	args := append(prefix, bin, "--socket", p.Socket, "--duration", "300ms", "--json")
	cmd := exec.Command(args[0], args[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	for _, want := range []string{
		"eBPF probes unavailable: CAP_BPF (to create BPF maps and load programs); CAP_PERFMON (to attach tracepoints and uprobes) — or CAP_SYS_ADMIN instead",
		"falling back to ctxd's Go-side timings over " + p.Socket,
	} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
	var r ctxtrace.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if r.Source != ctxtrace.SourceGoSide || len(r.Missing) < 2 || !strings.HasPrefix(r.Missing[0], "CAP_BPF") {
		t.Fatalf("report: source %s, missing %q", r.Source, r.Missing)
	}
	if _, ok := r.Probe("fetch_phase.arena_lookup"); !ok {
		t.Fatalf("no Go-side fetch phases: %s", out.String())
	}
}
