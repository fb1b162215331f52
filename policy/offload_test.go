package policy

import (
	"errors"
	"strings"
	"testing"
)

func TestPlanOffload(t *testing.T) {
	layers := []int64{100, 100, 100, 100}
	in := OffloadInput{DeviceFreeBytes: 1000, LayerBytes: layers, OutputBytes: 50,
		KVBytesPerTokenLayer: 1, KVTokens: 10, ComputeBytes: 20, MarginBytes: 30, RequestedLayers: OffloadAll}
	o, err := PlanOffload(in)
	// 4×100 + 50 + 4×10 + 20 + 30 = 540 ≤ 1000: everything.
	if err != nil || o.Layers != 4 || !o.Output || o.LeftBytes != 460 || !strings.HasPrefix(o.Reason, "all fit") {
		t.Fatalf("all: %+v %v", o, err)
	}
	in.DeviceFreeBytes = 400 // k blocks cost 110k + 50; 2 blocks = 270, 3 = 380 (no output head)
	if o, err = PlanOffload(in); err != nil || o.Layers != 3 || o.Output || o.LeftBytes != 20 {
		t.Fatalf("partial: %+v %v", o, err)
	}
	in.DeviceFreeBytes = 100
	if o, err = PlanOffload(in); err != nil || o.Layers != 0 || !strings.Contains(o.Reason, "not even one") {
		t.Fatalf("none: %+v %v", o, err)
	}
	in.RequestedLayers = 2
	if _, err = PlanOffload(in); !errors.Is(err, ErrInsufficientMemory) {
		t.Fatalf("requested beyond memory: %v", err)
	}
	in.DeviceFreeBytes, in.RequestedLayers = 1000, 9
	if o, err = PlanOffload(in); err != nil || o.Layers != 4 || !o.Output {
		t.Fatalf("requested more than the model has: %+v %v", o, err)
	}
	in.LayerBytes = []int64{1, -1}
	if _, err = PlanOffload(in); !errors.Is(err, ErrInvalidCapacityInput) {
		t.Fatalf("negative layer: %v", err)
	}
}

func TestChooseDevice(t *testing.T) {
	devs := []DeviceCandidate{
		{Name: "CPU", Backend: "CPU", Kind: "cpu", FreeBytes: 1 << 40},
		{Name: "Vulkan0", Backend: "Vulkan", Kind: "igpu", FreeBytes: 8 << 30},
		{Name: "Vulkan1", Backend: "Vulkan", Kind: "gpu", FreeBytes: 4 << 30},
		{Name: "CUDA0", Backend: "CUDA", Kind: "gpu", FreeBytes: 80 << 30},
	}
	for want, idx := range map[string]int{"": 3, "vulkan": 2, "Vulkan0": 1, "cuda": 3, "cpu": -1} {
		if i, _, err := ChooseDevice(devs, want); err != nil || i != idx {
			t.Errorf("ChooseDevice(%q) = %d, %v; want %d", want, i, err, idx)
		}
	}
	if _, _, err := ChooseDevice(devs, "rocm"); !errors.Is(err, ErrUnknownName) {
		t.Fatalf("unknown: %v", err)
	}
	if i, reason, err := ChooseDevice(devs[:1], ""); i != -1 || err != nil || !strings.Contains(reason, "no GPU") {
		t.Fatalf("CPU only: %d %q %v", i, reason, err)
	}
}
