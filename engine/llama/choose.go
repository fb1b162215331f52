package llama

import (
	"fmt"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
)

// ChooseDevice picks a registered device by policy.ChooseDevice; ok is
// false for the CPU.
func ChooseDevice(want string) (dev engine.Device, ok bool, reason string, err error) {
	devs := Devices()
	cands := make([]policy.DeviceCandidate, len(devs))
	for i, d := range devs {
		cands[i] = policy.DeviceCandidate{Name: d.Name, Backend: d.Backend, Kind: d.Kind, FreeBytes: d.FreeBytes}
	}
	i, reason, err := policy.ChooseDevice(cands, want)
	if err != nil {
		return engine.Device{}, false, "", fmt.Errorf("%w: %w", engine.ErrInvalidArgument, err)
	}
	if i < 0 {
		return engine.Device{}, false, reason, nil
	}
	return devs[i], true, reason, nil
}
