package llama

import "github.com/ctxd/ctxd/engine"

// ChooseDevice picks a registered device by engine.ChooseDevice; ok is
// false for the CPU.
func ChooseDevice(want string) (dev engine.Device, ok bool, reason string, err error) {
	return engine.ChooseDevice(Devices(), want)
}
