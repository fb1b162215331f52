package sidecar

import (
	"os/exec"
	"strings"
	"testing"
)

// TestEngineIsTheOnlyDoor holds the daemon to reaching llama.cpp only
// through package engine's interfaces (Config.Engine): neither the daemon
// nor anything it links imports engine/llama or any cgo package, so it
// runs on a fake engine as well as on the real one.
func TestEngineIsTheOnlyDoor(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if and .CgoFiles (not .Standard)}}{{.ImportPath}}{{end}}", "github.com/ctxd/ctxd/sidecar").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if cgo := strings.Fields(string(out)); len(cgo) > 0 {
		t.Fatalf("sidecar links cgo packages: %s", strings.Join(cgo, ", "))
	}
	deps, err := exec.Command("go", "list", "-deps", "github.com/ctxd/ctxd/sidecar").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, d := range strings.Fields(string(deps)) {
		if d == "github.com/ctxd/ctxd/engine/llama" || strings.HasPrefix(d, "github.com/ollama/") {
			t.Fatalf("sidecar links %s", d)
		}
	}
}
