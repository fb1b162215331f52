package sidecar

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// devicePlan is where a model is to be loaded, decided before loading it
// from its file's layout and the device's free memory.
type devicePlan struct {
	device  engine.Device // Name "" = the CPU
	offload policy.Offload
	reason  string
}

// modelOptions are the engine's load options for the plan.
func (p devicePlan) modelOptions() engine.ModelOptions {
	if p.device.Name == "" || p.offload.Layers == 0 {
		return engine.ModelOptions{}
	}
	o := engine.ModelOptions{Device: p.device.Name, GPULayers: p.offload.Layers}
	if p.offload.Output {
		o.GPULayers = engine.AllLayers
	}
	return o
}

// planDevice picks the device (cfg.Device, by policy.ChooseDevice among
// the backends loaded from cfg.BackendDir) and how many layers go to it
// (policy.PlanOffload): the weights, the compute buffers and the KV cells
// that live on the device — the hot set in hot-set mode, else the context —
// must fit its free memory.
func planDevice(cfg *Config, path string, contextTokens int, kv policy.KVType) (devicePlan, error) {
	if cfg.BackendDir != "" {
		// Already-loaded folders are remembered; a folder without backends
		// leaves the CPU, which ChooseDevice reports below.
		if err := cfg.Engine.LoadBackends(cfg.BackendDir); err != nil && !errors.Is(err, engine.ErrNoBackends) {
			return devicePlan{}, fmt.Errorf("%w: %w", protocol.ErrInternal, err)
		}
	}
	dev, ok, reason, err := engine.ChooseDevice(cfg.Engine.Devices(), cfg.Device)
	if err != nil {
		return devicePlan{}, fmt.Errorf("%w: %w", protocol.ErrInvalidArgument, err)
	}
	if !ok {
		return devicePlan{reason: reason}, nil
	}
	layout, err := cfg.Engine.ReadLayout(path)
	if err != nil {
		// llama.cpp judges the file when it loads it; what ctxd's own
		// reader could not size stays on the CPU, with the reason.
		return devicePlan{reason: fmt.Sprintf("%s: cannot size the layers to offload (%v): every layer on the CPU", dev.Name, err)}, nil
	}
	cells := deviceKVTokens(cfg, layout, contextTokens)
	batch := cfg.BatchTokens
	if batch == 0 {
		batch = 512
	}
	req := cfg.GPULayers
	if req <= 0 {
		req = policy.OffloadAll
	}
	off, err := policy.PlanOffload(policy.OffloadInput{
		DeviceFreeBytes: dev.FreeBytes, LayerBytes: layout.LayerBytes, OutputBytes: layout.OutputBytes,
		KVBytesPerTokenLayer: policy.KVBytesPerToken(1, layout.KVHeads, layout.HeadDim, kv), KVTokens: int64(cells),
		ComputeBytes:    policy.ComputeBufferBytes(min(batch, cells), layout.VocabSize, layout.Embd, layout.Heads, int64(cells), cfg.FlashAttention),
		RequestedLayers: req,
	})
	if err != nil {
		return devicePlan{}, fmt.Errorf("%w: --gpu-layers %d on %s: %v", protocol.ErrResourceExhausted, cfg.GPULayers, dev.Name, err)
	}
	if off.Layers == 0 {
		return devicePlan{reason: dev.Name + ": " + off.Reason + "; every layer on the CPU"}, nil
	}
	return devicePlan{device: dev, offload: off, reason: reason + "; " + off.Reason}, nil
}

// deviceKVTokens is the KV cells a context will have on the device: the hot
// set and room for a block passing through in hot-set mode, else the
// context asked for (or the trained window).
func deviceKVTokens(cfg *Config, l engine.Layout, contextTokens int) int {
	if cfg.HotTokens > 0 {
		block := cfg.BlockTokens
		if block == 0 {
			block = 64
		}
		hot := cfg.HotTokens
		if w := cfg.Window; w > 0 {
			hot = min(hot, w)
		} else if l.TrainedContext > 0 {
			hot = min(hot, l.TrainedContext)
		}
		return hot + 2*block
	}
	if contextTokens > 0 {
		return contextTokens
	}
	return max(l.TrainedContext, 1)
}

// deviceInfo is the Status view of where the model runs.
func (srv *Server) deviceInfo() *pb.DeviceInfo {
	s := srv.slot
	p := s.facts.Placement
	d := &pb.DeviceInfo{
		Name: p.Device.Name, Description: p.Device.Description, Backend: p.Device.Backend,
		TotalBytes: p.Device.TotalBytes, FreeBytes: p.Device.FreeBytes,
		GpuLayers: int32(p.GPULayers), Layers: int32(s.facts.Layers), OutputOnDevice: p.OutputOnGPU,
		WeightsBytes: p.DeviceWeightsBytes, HostWeightsBytes: p.HostWeightsBytes,
		Reason: s.deviceReason,
	}
	if s.ectx != nil {
		m := s.ectx.Memory()
		d.KvBytes, d.ComputeBytes, d.HostKvBytes = m.DeviceKVBytes, m.DeviceComputeBytes, m.HostKVBytes
	}
	return d
}

// threadsReporter is what an engine context tells of its CPU threads
// (engine/llama: policy.ComputeThreads' decisions); safe to call while a
// call runs.
type threadsReporter interface {
	Threads() int
	ThreadsReason() string
}

// withThreads is the published device d with the context's threads as
// they are now: status reads them live, since they change with every
// decode call and the view is published at load.
func withThreads(d *pb.DeviceInfo, t threadsReporter) *pb.DeviceInfo {
	if d == nil || t == nil {
		return d
	}
	d = proto.Clone(d).(*pb.DeviceInfo)
	d.Threads = int32(t.Threads())
	if why := t.ThreadsReason(); why != "" {
		// The proto has no field of its own for it: the reason of the
		// device choice is followed by the threads'.
		d.Reason += "; cpu threads: " + why
	}
	return d
}

// backendSettings names the backend that computes the KV of a run on a
// device, for the compatibility keys of stored blocks and snapshots: KV
// made on another backend (or with another split of layers) differs in its
// last bits and is never silently mixed with this run's. Empty on the CPU,
// so CPU keys are those of earlier versions.
func backendSettings(p engine.Placement) string {
	if p.Device.Name == "" {
		return ""
	}
	out := 0
	if p.OutputOnGPU {
		out = 1
	}
	return fmt.Sprintf("backend=%s gpu_layers=%d+%d", p.Device.Backend, p.GPULayers, out)
}
