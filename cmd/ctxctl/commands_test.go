package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/sidecar"
)

func ctl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCommandsAgainstADaemon(t *testing.T) {
	p, err := sidecar.StartPrivate(sidecar.Config{Engine: llama.Backend{}, ModelPath: testmodel.Stories(t), ContextTokens: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	sock := p.Socket

	code, out, errs := ctl(t, "--socket", sock, "status", "--json")
	var st map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st["model"] == nil {
		t.Fatalf("status: %d %s %s", code, out, errs)
	}
	code, out, errs = ctl(t, "--socket", sock, "status")
	if code != 0 || !strings.Contains(out, "640 bytes/token") {
		t.Fatalf("status text: %d %s %s", code, out, errs)
	}

	code, out, errs = ctl(t, "--socket", sock, "generate", "--prompt", "Once upon a time", "--max-tokens", "12")
	if code != 0 || !strings.HasPrefix(out, "Once upon a time, there was a little girl") {
		t.Fatalf("generate: %d %q %s", code, out, errs)
	}
	// After a decode, status shows how the CPU threads were chosen
	// (adaptive by default; one thread when the GPU computes).
	code, out, errs = ctl(t, "--socket", sock, "status")
	if code != 0 || !strings.Contains(out, "threads chosen") || !strings.Contains(out, "auto") && !strings.Contains(out, "GPU") {
		t.Fatalf("status after generate: %d %s %s", code, out, errs)
	}
	// generate closed its session; nothing is left to explain.
	code, _, errs = ctl(t, "--socket", sock, "explain")
	if code != 1 || !strings.Contains(errs, "not found") {
		t.Fatalf("explain without sessions: %d %s", code, errs)
	}

	code, _, errs = ctl(t, "--socket", sock, "load", "--model", filepath.Join(t.TempDir(), "missing.gguf"))
	if code != 1 || !strings.Contains(errs, "missing.gguf") {
		t.Fatalf("load missing: %d %s", code, errs)
	}
}

func TestUsageAndUnreachableDaemon(t *testing.T) {
	if code, _, _ := ctl(t, "frobnicate"); code != 2 {
		t.Fatalf("unknown command: %d", code)
	}
	if code, _, _ := ctl(t, "generate"); code != 2 {
		t.Fatalf("generate without prompt: %d", code)
	}
	// Benchmarks moved to ctxbench; ctxctl replay talks to a daemon only.
	for _, args := range [][]string{{"bench", "socket"}, {"eval", "recall"}, {"gen-model"}, {"replay", "--trace", "t.traj", "--model", "m.gguf"}} {
		if code, _, _ := ctl(t, args...); code != 2 {
			t.Fatalf("%v: %d, want 2", args, code)
		}
	}
	code, _, errs := ctl(t, "--socket", filepath.Join(t.TempDir(), "none.sock"), "status")
	if code != 1 || !strings.Contains(errs, "is ctxd running") {
		t.Fatalf("no daemon: %d %s", code, errs)
	}
}
