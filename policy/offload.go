package policy

import "fmt"

// OffloadAll asks PlanOffload for every layer that fits.
const OffloadAll = -1

// OffloadInput is what PlanOffload decides from, measured by the caller:
// the device's free memory and the model's sizes read from its file.
type OffloadInput struct {
	DeviceFreeBytes int64   // free device memory (ggml_backend_dev_memory)
	LayerBytes      []int64 // weight bytes of each transformer block, in order
	OutputBytes     int64   // output head: placed on the device with every block
	// KVBytesPerTokenLayer is one token's K and V in one layer; KVTokens
	// the cells that live on the device (the hot set, or the dense context).
	KVBytesPerTokenLayer int64
	KVTokens             int64
	ComputeBytes         int64 // the device's compute buffers (ComputeBufferBytes)
	// MarginBytes is kept free for the driver and allocator slack; 0 means
	// DefaultOverhead(DeviceFreeBytes).
	MarginBytes int64
	// RequestedLayers is OffloadAll, or exactly this many blocks counted
	// from the last (more than the model has means all, output included).
	RequestedLayers int
}

// Offload is PlanOffload's decision and the device memory split behind it.
type Offload struct {
	Layers       int  // blocks on the device, counted from the last
	Output       bool // the output head too
	WeightsBytes int64
	KVBytes      int64
	ComputeBytes int64
	MarginBytes  int64
	LeftBytes    int64 // free device memory after all of the above
	Reason       string
}

// ComputeBufferBytes estimates the device compute buffers of one batch:
// the logits of batch tokens, a few embedding-wide activations per token,
// and without flash attention the batch × context attention scores of
// every head (float32 throughout).
func ComputeBufferBytes(batch, vocab, embd, heads int, contextTokens int64, flash bool) int64 {
	b := int64(max(batch, 1))
	n := 4 * b * (int64(max(vocab, 0)) + 8*int64(max(embd, 0)))
	if !flash {
		n += 4 * b * int64(max(heads, 1)) * max(contextTokens, 1)
	}
	return n
}

// PlanOffload decides how many transformer blocks go to the device:
// weights of the offloaded blocks, their part of the KV cache, the compute
// buffers and a margin must fit the free device memory. With OffloadAll it
// takes the most blocks that fit (llama.cpp offloads the last ones); a
// requested count that does not fit is an error wrapping
// ErrInsufficientMemory, with the figures computed so far.
func PlanOffload(in OffloadInput) (Offload, error) {
	n := len(in.LayerBytes)
	switch {
	case in.DeviceFreeBytes < 0 || in.OutputBytes < 0 || in.KVBytesPerTokenLayer < 0 || in.KVTokens < 0 || in.ComputeBytes < 0 || in.MarginBytes < 0:
		return Offload{}, fmt.Errorf("%w: negative size in offload input", ErrInvalidCapacityInput)
	case in.RequestedLayers < OffloadAll:
		return Offload{}, fmt.Errorf("%w: requested layers %d", ErrInvalidCapacityInput, in.RequestedLayers)
	}
	for i, b := range in.LayerBytes {
		if b < 0 {
			return Offload{}, fmt.Errorf("%w: layer %d has %d weight bytes", ErrInvalidCapacityInput, i, b)
		}
	}
	margin := in.MarginBytes
	if margin == 0 {
		margin = DefaultOverhead(in.DeviceFreeBytes)
	}
	kvLayer := in.KVBytesPerTokenLayer * in.KVTokens
	cost := func(k int) Offload {
		o := Offload{Layers: k, Output: k == n && n > 0, MarginBytes: margin}
		if k == 0 {
			o.LeftBytes = in.DeviceFreeBytes
			return o
		}
		for _, b := range in.LayerBytes[n-k:] {
			o.WeightsBytes += b
		}
		if o.Output {
			o.WeightsBytes += in.OutputBytes
		}
		o.KVBytes = int64(k) * kvLayer
		o.ComputeBytes = in.ComputeBytes
		o.LeftBytes = in.DeviceFreeBytes - o.WeightsBytes - o.KVBytes - o.ComputeBytes - margin
		return o
	}
	split := func(o Offload) string {
		return fmt.Sprintf("%d of %d layers%s: %s weights + %s KV (%d tokens) + %s compute + %s margin of %s free, %s left",
			o.Layers, n, map[bool]string{true: " and the output head", false: ""}[o.Output],
			formatBytes(o.WeightsBytes), formatBytes(o.KVBytes), in.KVTokens, formatBytes(o.ComputeBytes),
			formatBytes(o.MarginBytes), formatBytes(in.DeviceFreeBytes), formatBytes(o.LeftBytes))
	}
	if in.RequestedLayers != OffloadAll {
		o := cost(min(in.RequestedLayers, n))
		if o.LeftBytes < 0 {
			return o, fmt.Errorf("%w: %s", ErrInsufficientMemory, split(o))
		}
		o.Reason = "requested: " + split(o)
		return o, nil
	}
	for k := n; k > 0; k-- {
		if o := cost(k); o.LeftBytes >= 0 {
			if k == n {
				o.Reason = "all fit: " + split(o)
			} else {
				o.Reason = "device memory: " + split(o)
			}
			return o, nil
		}
	}
	o := cost(0)
	one := cost(min(1, n))
	o.Reason = "device memory: not even one layer fits: " + split(one)
	return o, nil
}
