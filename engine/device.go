package engine

// Device kinds, as ggml classifies its devices.
const (
	DeviceCPU   = "cpu"
	DeviceGPU   = "gpu"
	DeviceIGPU  = "igpu"
	DeviceAccel = "accel"
)

// Device is a compute device an engine can place layers on.
type Device struct {
	Name        string // the engine's device name, e.g. "Vulkan0", "CUDA0", "CPU"
	Description string // the driver's description, e.g. "NVIDIA H200"
	Backend     string // the backend library serving it: "CPU", "Vulkan", "CUDA"
	Kind        string // DeviceCPU, DeviceGPU, DeviceIGPU or DeviceAccel
	FreeBytes   int64  // memory free on the device when asked
	TotalBytes  int64
}

// Offloads reports whether layers placed on d leave host memory.
func (d Device) Offloads() bool { return d.Kind == DeviceGPU || d.Kind == DeviceIGPU }

// AllLayers asks ModelOptions for every layer, output head included.
const AllLayers = -1

// ModelOptions selects where a model's layers run.
type ModelOptions struct {
	// Device names the device to offload to ("" = none: the CPU); see
	// Device.Name. The caller picks it (policy.ChooseDevice).
	Device string
	// GPULayers is how many transformer blocks go to Device, counted from
	// the last; AllLayers (or anything ≥ Layers+1) also offloads the
	// output head. Ignored without Device.
	GPULayers int
}

// Placement says where a loaded model's weights and KV live.
type Placement struct {
	Device             Device // the device offloaded to; Name "" for CPU only
	GPULayers          int    // transformer blocks on the device
	OutputOnGPU        bool   // the output head too (all blocks offloaded)
	DeviceWeightsBytes int64  // weight bytes placed on the device
	HostWeightsBytes   int64  // weight bytes left in host memory
}

// Layout is what a model file says about its size before it is loaded:
// enough to plan an offload without loading it.
type Layout struct {
	Layers         int
	KVHeads        int
	HeadDim        int
	Embd           int
	Heads          int
	VocabSize      int
	TrainedContext int
	LayerBytes     []int64 // weight bytes of each transformer block, in order
	OutputBytes    int64   // output head and final norm: offloaded with every block
	InputBytes     int64   // token embeddings: stay in host memory
}
