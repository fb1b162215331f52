package sidecar

import (
	"testing"

	"github.com/ctxd/ctxd/engine"
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
