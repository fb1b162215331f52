package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoCgoDependencies holds ctxctl to being a small operator binary: no
// package it links outside the standard library has cgo files (not
// engine/llama, not ollama's llama, not cilium/ebpf, not sidecar).
func TestNoCgoDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if and .CgoFiles (not .Standard)}}{{.ImportPath}}{{end}}", "github.com/ctxd/ctxd/cmd/ctxctl").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if cgo := strings.Fields(string(out)); len(cgo) > 0 {
		t.Fatalf("ctxctl links cgo packages: %s", strings.Join(cgo, ", "))
	}
	deps, err := exec.Command("go", "list", "-deps", "github.com/ctxd/ctxd/cmd/ctxctl").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	// Pure-Go packages that would still drag the daemon or the tracer in.
	for _, banned := range []string{"github.com/cilium/ebpf", "github.com/ctxd/ctxd/sidecar", "github.com/ctxd/ctxd/engine"} {
		for _, d := range strings.Fields(string(deps)) {
			if d == banned || strings.HasPrefix(d, banned+"/") {
				t.Fatalf("ctxctl links %s", d)
			}
		}
	}
}
