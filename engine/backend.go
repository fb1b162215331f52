package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/ctxd/ctxd/policy"
)

// ErrNoBackends reports a backend folder holding no loadable GPU backend
// library. It is not fatal: the CPU stays available.
var ErrNoBackends = errors.New("engine: no GPU backend library")

// Backend is a whole inference engine as the daemon reaches it: the only
// door from the daemon to native code. The daemon is handed one in its
// configuration (cmd/ctxd passes engine/llama's; unit tests pass
// engine/enginefake's) and calls nothing else of the engine's package.
// Its methods are grouped by the daemon's part that calls them.
type Backend interface {
	Placer
	Loader
	// SystemInfo describes the build (CPU features, compiled-in
	// backends) for Status. It never blocks.
	SystemInfo() string
	// BlobCodec is the codec of the state blobs this engine's contexts
	// produce, used by the SSD tier and the snapshots.
	BlobCodec() BlobCodec
}

// Placer is what the daemon asks before a load to plan where a model runs
// (its device planning).
type Placer interface {
	// LoadBackends registers the GPU backend libraries found in dir, once
	// per folder for the life of the process; later calls with the same
	// folder return the first call's result. A folder without any gives
	// an error wrapping ErrNoBackends and changes nothing.
	LoadBackends(dir string) error
	// Devices lists the devices models can be placed on now, the CPU
	// included, with their free memory as of this call.
	Devices() []Device
	// ReadLayout reads a model file's header (no tensor data) for the
	// sizes an offload is planned from. Failures wrap ErrBadModel.
	ReadLayout(path string) (Layout, error)
}

// Loader is what the model slot calls to load a model.
type Loader interface {
	// Load reads the model file at path, placing layers as o says. A
	// missing file wraps os.ErrNotExist; a file the engine cannot use
	// wraps ErrBadModel; an unknown device wraps ErrInvalidArgument. When
	// ctx ends first the load is abandoned where the engine allows (while
	// the file is hashed and between the engine's progress reports) and
	// the error wraps ctx.Err(); nothing of the model stays allocated.
	// Facts().Placement reports what was actually allocated where.
	Load(ctx context.Context, path string, o ModelOptions) (Model, error)
}

// BlobCodec knows the layout of the state blobs (Range.Blob, SeqState.Blob)
// of one engine, so that the daemon can store them compactly without
// knowing it.
type BlobCodec interface {
	// TokenMajor returns blob rewritten so that every token's bytes lie
	// together (which compresses better), and whether it changed
	// anything. A blob already token-major, or one that does not parse, is
	// returned as it is with changed false. It never modifies blob.
	TokenMajor(blob []byte) (out []byte, changed bool)
	// FromTokenMajor inverts TokenMajor for a blob it changed: the exact
	// original bytes. A blob that does not parse gives an error wrapping
	// ErrInvalidArgument. It never modifies blob.
	FromTokenMajor(blob []byte) ([]byte, error)
}

// ChooseDevice picks one of devs by policy.ChooseDevice (want "" = the GPU
// with the most free memory, "cpu" = none, else a device or backend name);
// ok is false for the CPU, with the reason. An unknown want wraps
// ErrInvalidArgument.
func ChooseDevice(devs []Device, want string) (dev Device, ok bool, reason string, err error) {
	cands := make([]policy.DeviceCandidate, len(devs))
	for i, d := range devs {
		cands[i] = policy.DeviceCandidate{Name: d.Name, Backend: d.Backend, Kind: d.Kind, FreeBytes: d.FreeBytes}
	}
	i, reason, err := policy.ChooseDevice(cands, want)
	if err != nil {
		return Device{}, false, "", fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	if i < 0 {
		return Device{}, false, reason, nil
	}
	return devs[i], true, reason, nil
}
