// Package testmodel finds the real models and traces that ctxd's tests
// use: ../shared beside the checkout, or the files named by CTXD_MODEL,
// CTXD_NEEDLE_MODEL, CTXD_TRACES and CTXD_AGENT_REQUESTS. A missing file fails the test: no
// engine test is skipped for lack of its model.
package testmodel

import (
	"os"
	"path/filepath"
	"testing"
)

// Stories is the path of stories260K.gguf.
func Stories(t testing.TB) string {
	return find(t, "CTXD_MODEL", "models/stories260K.gguf")
}

// Needle is the path of needle.gguf.
func Needle(t testing.TB) string {
	return find(t, "CTXD_NEEDLE_MODEL", "models/needle.gguf")
}

// Traces is the folder of SWE-agent trajectories.
func Traces(t testing.TB) string {
	return find(t, "CTXD_TRACES", "traces")
}

// AgentRequests is the folder of recorded coding-agent HTTP requests.
func AgentRequests(t testing.TB) string {
	return find(t, "CTXD_AGENT_REQUESTS", "agent-requests")
}

func find(t testing.TB, env, rel string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v", env, p, err)
		}
		return p
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "..", "shared", rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("test data %s not found (set %s): %v", p, env, err)
	}
	return p
}

// RepoRoot is the folder holding go.mod, found upward from the working folder.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}

// Backend is the GPU backend the engine tests run on, from CTXD_BACKEND
// (e.g. "vulkan", "cuda"; "" = the CPU), and the folder holding its
// library: CTXD_BACKEND_DIR, else bin/backends of the checkout. Tests that
// load a model offload every layer to the backend's first device and fail
// when the layers did not land there.
func Backend(t testing.TB) (name, dir string) {
	t.Helper()
	name = os.Getenv("CTXD_BACKEND")
	if name == "" || name == "cpu" {
		return "", ""
	}
	if dir = os.Getenv("CTXD_BACKEND_DIR"); dir != "" {
		return name, dir
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return name, filepath.Join(root, "bin", "backends")
}
