package policy

import (
	"fmt"
)

// Memory kinds accepted in CapacityInput.MemoryKind.
const (
	MemoryHost   = "host"
	MemoryDevice = "device"
)

// Default overhead when CapacityInput.OverheadBytes is 0: a fixed
// DefaultOverheadBaseBytes plus DefaultOverheadPercent percent of the usable
// memory. The fixed part covers compute and logits buffers of small models;
// the proportional part keeps a margin that grows with the machine (allocator
// slack, the runtime, buffers that scale with the context).
const (
	DefaultOverheadBaseBytes = 64 << 20
	DefaultOverheadPercent   = 5
)

// DefaultOverhead returns the overhead assumed for usable bytes of memory
// when the caller gives none: 64 MiB + 5% of usable (64 MiB for usable ≤ 0).
func DefaultOverhead(usable int64) int64 {
	if usable <= 0 {
		return DefaultOverheadBaseBytes
	}
	return DefaultOverheadBaseBytes + usable/100*DefaultOverheadPercent + usable%100*DefaultOverheadPercent/100
}

// ModelFacts are the dimensions of a loaded model that capacity depends on,
// as read from its file by the caller.
type ModelFacts struct {
	Layers         int   // transformer blocks holding a KV cache
	KVHeads        int   // key/value heads per layer (GQA groups)
	HeadDim        int   // elements per head
	TrainedContext int   // context length the model was trained for
	WeightsBytes   int64 // bytes of weights resident in the memory measured
}

// CapacityInput is everything PlanCapacity needs, measured by the caller.
type CapacityInput struct {
	Facts  ModelFacts
	KVType KVType
	// UsableBytes is the free host RAM or device memory the caller measured.
	UsableBytes int64
	// MemoryKind is MemoryHost or MemoryDevice; empty means MemoryHost.
	MemoryKind string
	// OverheadBytes is reserved for compute buffers and the like. 0 means
	// DefaultOverhead(UsableBytes); to reserve (almost) nothing, pass 1.
	OverheadBytes int64
	// ModelMaxTokens is the model's maximum context (GGUF context_length);
	// 0 means Facts.TrainedContext.
	ModelMaxTokens int
	// RequestedTokens is the context asked for (--ctx); 0 means derive it.
	RequestedTokens int
}

// Capacity is the outcome of PlanCapacity.
type Capacity struct {
	KVBytesPerToken int64
	UsableBytes     int64
	WeightsBytes    int64
	OverheadBytes   int64 // the overhead used, after applying the default
	// MemoryTokens is (UsableBytes − WeightsBytes − OverheadBytes) /
	// KVBytesPerToken, never negative.
	MemoryTokens   int64
	ModelMaxTokens int64
	// EffectiveTokens is min(ModelMaxTokens, MemoryTokens).
	EffectiveTokens int64
	// ContextTokens is what to allocate: RequestedTokens when set (it may
	// exceed ModelMaxTokens, with a Warning), else EffectiveTokens.
	ContextTokens int64
	// Clamped is true when memory, not the model maximum, bounds
	// EffectiveTokens.
	Clamped bool
	// Reason says, with numbers, which bound sets EffectiveTokens; it starts
	// with "memory" or "model maximum".
	Reason string
	// Warning is set when ContextTokens exceeds the model maximum.
	Warning    string
	MemoryKind string
}

// PlanCapacity decides how many tokens of KV cache to allocate.
//
// Invalid input gives an error wrapping ErrInvalidCapacityInput and a zero
// Capacity. When weights and overhead leave no room for a single token, or
// RequestedTokens exceeds MemoryTokens, the error wraps ErrInsufficientMemory
// and the returned Capacity still carries the figures computed so far, for
// diagnostics.
func PlanCapacity(in CapacityInput) (Capacity, error) {
	if err := checkCapacityInput(in); err != nil {
		return Capacity{}, err
	}
	f := in.Facts
	kvpt := KVBytesPerToken(f.Layers, f.KVHeads, f.HeadDim, in.KVType)
	if kvpt <= 0 {
		return Capacity{}, fmt.Errorf("%w: KV bytes per token overflow int64 (%d layers, %d KV heads, head dim %d, %s)",
			ErrInvalidCapacityInput, f.Layers, f.KVHeads, f.HeadDim, in.KVType)
	}
	kind := in.MemoryKind
	if kind == "" {
		kind = MemoryHost
	}
	overhead := in.OverheadBytes
	if overhead == 0 {
		overhead = DefaultOverhead(in.UsableBytes)
	}
	modelMax := int64(in.ModelMaxTokens)
	if modelMax == 0 {
		modelMax = int64(f.TrainedContext)
	}
	c := Capacity{
		KVBytesPerToken: kvpt,
		UsableBytes:     in.UsableBytes,
		WeightsBytes:    f.WeightsBytes,
		OverheadBytes:   overhead,
		ModelMaxTokens:  modelMax,
		MemoryKind:      kind,
	}

	// usable > 0 and weights ≥ 0, so neither subtraction overflows.
	left := in.UsableBytes - f.WeightsBytes
	if left < overhead {
		return c, fmt.Errorf("%w: %s of weights and %s of overhead exceed the %s of usable %s memory",
			ErrInsufficientMemory, formatBytes(f.WeightsBytes), formatBytes(overhead), formatBytes(in.UsableBytes), kind)
	}
	free := left - overhead
	c.MemoryTokens = TokensForBytes(free, kvpt)
	if c.MemoryTokens == 0 {
		return c, fmt.Errorf("%w: %s of usable %s memory leaves %s after %s of weights and %s of overhead, less than one token of KV (%s)",
			ErrInsufficientMemory, formatBytes(in.UsableBytes), kind, formatBytes(free),
			formatBytes(f.WeightsBytes), formatBytes(overhead), formatBytes(kvpt))
	}

	c.EffectiveTokens = min(modelMax, c.MemoryTokens)
	c.Clamped = c.MemoryTokens < modelMax
	if c.Clamped {
		c.Reason = fmt.Sprintf("memory: %s of %s memory left after %s of weights and %s of overhead holds %d tokens at %s per token, below the model maximum of %d",
			formatBytes(free), kind, formatBytes(f.WeightsBytes), formatBytes(overhead),
			c.MemoryTokens, formatBytes(kvpt), modelMax)
	} else {
		c.Reason = fmt.Sprintf("model maximum: the model supports %d tokens; %s memory would hold %d",
			modelMax, kind, c.MemoryTokens)
	}

	c.ContextTokens = c.EffectiveTokens
	if req := int64(in.RequestedTokens); req > 0 {
		if req > c.MemoryTokens {
			return c, fmt.Errorf("%w: %d requested tokens need %s of KV at %s per token, but %s of %s memory is left after %s of weights and %s of overhead (room for %d tokens)",
				ErrInsufficientMemory, req, formatBytes(BytesForTokens(req, kvpt)), formatBytes(kvpt),
				formatBytes(free), kind, formatBytes(f.WeightsBytes), formatBytes(overhead), c.MemoryTokens)
		}
		if req > modelMax {
			c.Warning = fmt.Sprintf("%d requested tokens exceed the model maximum of %d; output past %d tokens may degrade",
				req, modelMax, modelMax)
		}
		c.ContextTokens = req
	}
	return c, nil
}

// checkCapacityInput reports the first invalid field of in.
func checkCapacityInput(in CapacityInput) error {
	f := in.Facts
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidCapacityInput}, args...)...)
	}
	switch {
	case f.Layers <= 0:
		return bad("layers must be positive, got %d", f.Layers)
	case f.KVHeads <= 0:
		return bad("KV heads must be positive, got %d", f.KVHeads)
	case f.HeadDim <= 0:
		return bad("head dim must be positive, got %d", f.HeadDim)
	case f.TrainedContext < 0:
		return bad("trained context must not be negative, got %d", f.TrainedContext)
	case f.WeightsBytes < 0:
		return bad("weights bytes must not be negative, got %d", f.WeightsBytes)
	case !in.KVType.Valid():
		return bad("unknown KV type %s", in.KVType)
	case in.UsableBytes <= 0:
		return bad("usable bytes must be positive, got %d", in.UsableBytes)
	case in.MemoryKind != "" && in.MemoryKind != MemoryHost && in.MemoryKind != MemoryDevice:
		return bad("memory kind %q (want %q or %q)", in.MemoryKind, MemoryHost, MemoryDevice)
	case in.OverheadBytes < 0:
		return bad("overhead bytes must not be negative, got %d", in.OverheadBytes)
	case in.ModelMaxTokens < 0:
		return bad("model max tokens must not be negative, got %d", in.ModelMaxTokens)
	case in.ModelMaxTokens == 0 && f.TrainedContext == 0:
		return bad("model max tokens unknown: both ModelMaxTokens and Facts.TrainedContext are 0")
	case in.RequestedTokens < 0:
		return bad("requested tokens must not be negative, got %d", in.RequestedTokens)
	}
	return nil
}

// SmallModelBytes is the weight size under which single-token decode runs
// on one thread: such a step is dominated by per-call overhead, and a
// second thread only adds synchronisation (measured on stories260K: 0.6 ms
// per token on one thread, 1–4.6 ms on two).
const SmallModelBytes = 64 << 20

// DecodeThreads picks the threads for single-token decode steps; prefill
// batches always use all cpus.
func DecodeThreads(weightsBytes int64, cpus int) int {
	if cpus < 1 {
		cpus = 1
	}
	if weightsBytes < SmallModelBytes {
		return 1
	}
	return cpus
}
