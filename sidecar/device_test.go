package sidecar

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/policy"
)

func TestDeviceKVTokens(t *testing.T) {
	l := engine.Layout{TrainedContext: 4096}
	for _, c := range []struct {
		cfg  Config
		ctx  int
		want int
	}{
		{Config{HotTokens: 512}, 0, 512 + 2*64},
		{Config{HotTokens: 8192}, 0, 4096 + 2*64}, // the hot set stays within the window
		{Config{HotTokens: 512, Window: 256, BlockTokens: 32}, 0, 256 + 64},
		{Config{}, 1000, 1000},
		{Config{}, 0, 4096},
	} {
		if got := deviceKVTokens(&c.cfg, l, c.ctx); got != c.want {
			t.Errorf("deviceKVTokens(%+v, ctx %d) = %d, want %d", c.cfg, c.ctx, got, c.want)
		}
	}
}

func TestBackendSettingsKeepCPUKeys(t *testing.T) {
	if s := backendSettings(engine.Placement{}); s != "" {
		t.Fatalf("CPU settings %q: CPU compatibility keys must stay those of earlier versions", s)
	}
	p := engine.Placement{Device: engine.Device{Name: "Vulkan0", Backend: "Vulkan"}, GPULayers: 5, OutputOnGPU: true}
	if s := backendSettings(p); s != "backend=Vulkan gpu_layers=5+1" {
		t.Fatalf("settings %q", s)
	}
	p.OutputOnGPU, p.GPULayers = false, 3
	if s := backendSettings(p); s != "backend=Vulkan gpu_layers=3+0" {
		t.Fatalf("partial settings %q", s)
	}
}

// TestSnapshotFromOtherBackendIsRefused: a snapshot saved on the CPU is
// refused by a daemon whose model runs on the GPU backend (and the reason
// names both), so KV computed by two backends is never mixed; the session
// stays usable and recomputes. It needs CTXD_BACKEND (make test-gpu).
func TestSnapshotFromOtherBackendIsRefused(t *testing.T) {
	backend, _ := testmodel.Backend(t)
	if backend == "" {
		t.Skip("needs a GPU backend: CTXD_BACKEND=vulkan|cuda (make test-gpu)")
	}
	ctx := context.Background()
	data := filepath.Join(t.TempDir(), "data")
	cpu := startServer(t, Config{ContextTokens: 512, DataDir: data, IdleSnapshot: -1, Device: policy.DeviceCPU})
	c := dial(t, cpu)
	s := openSession(t, c)
	m := tokenManifest(randomTokens(1, 200))
	if _, err := s.EnsurePrefix(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot(ctx, "on-cpu"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	cpu.stop()

	gpu := startServer(t, Config{ContextTokens: 512, DataDir: data, IdleSnapshot: -1})
	c2 := dial(t, gpu)
	s2 := openSession(t, c2)
	_, err := s2.Restore(ctx, "on-cpu")
	if !errors.Is(err, client.ErrIncompatible) || !strings.Contains(err.Error(), "backend=") {
		t.Fatalf("restoring a CPU snapshot on %s: %v, want ErrIncompatible naming the backend", backend, err)
	}
	// Recompute instead: the same prefix prefills from scratch.
	pr, err := s2.EnsurePrefix(ctx, m)
	if err != nil || pr.PrefilledTokens != pr.PromptTokens || pr.PromptTokens < 200 || pr.ResumedSnapshot != "" {
		t.Fatalf("prefix after the refusal: %+v %v (want every token prefilled, nothing resumed)", pr, err)
	}
}
