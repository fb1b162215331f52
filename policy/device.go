package policy

import (
	"fmt"
	"strings"
)

// DeviceCandidate is a device the engine offers, as ChooseDevice sees it.
type DeviceCandidate struct {
	Name      string // "Vulkan0", "CUDA0", "CPU"
	Backend   string // "Vulkan", "CUDA", "CPU"
	Kind      string // "cpu", "gpu", "igpu", "accel"
	FreeBytes int64
}

// DeviceCPU is the --device value that keeps every layer on the CPU;
// DeviceAuto ("") picks a GPU when there is one.
const (
	DeviceCPU  = "cpu"
	DeviceAuto = ""
)

// ChooseDevice picks the device to offload to from want: a device name
// ("Vulkan0"), a backend name ("vulkan", "cuda": its device with the most
// free memory), DeviceCPU (none), or DeviceAuto (the GPU with the most free
// memory, a discrete one before an integrated one; none when there is no
// GPU). It returns the index in devs, or -1 for the CPU, and a reason for
// the log. A want that matches no GPU is an error wrapping ErrUnknownName
// naming what there is, so a misspelt --device never silently runs on the CPU.
func ChooseDevice(devs []DeviceCandidate, want string) (int, string, error) {
	if strings.EqualFold(want, DeviceCPU) {
		return -1, "--device cpu: every layer on the CPU", nil
	}
	best := -1
	rank := func(d DeviceCandidate) int {
		switch d.Kind {
		case "gpu":
			return 2
		case "igpu":
			return 1
		}
		return 0
	}
	for i, d := range devs {
		if rank(d) == 0 {
			continue
		}
		if want != DeviceAuto && !strings.EqualFold(want, d.Name) && !strings.EqualFold(want, d.Backend) {
			continue
		}
		if best < 0 || rank(d) > rank(devs[best]) || rank(d) == rank(devs[best]) && d.FreeBytes > devs[best].FreeBytes {
			best = i
		}
	}
	if best >= 0 {
		d := devs[best]
		return best, fmt.Sprintf("%s (%s, %s free)", d.Name, d.Backend, formatBytes(d.FreeBytes)), nil
	}
	if want == DeviceAuto {
		return -1, "no GPU device registered (no backend library loaded, or its driver found no device): every layer on the CPU", nil
	}
	var names []string
	for _, d := range devs {
		names = append(names, d.Name+" ("+d.Kind+")")
	}
	return -1, "", fmt.Errorf("%w: no GPU device matches --device %q (devices: %s)", ErrUnknownName, want, strings.Join(names, ", "))
}
