package engine

import (
	"fmt"
	"runtime"

	"github.com/ctxd/ctxd/policy"
)

// DefaultBatchTokens is a context's largest batch when ContextOptions
// leaves BatchTokens zero.
const DefaultBatchTokens = 512

// Resolve applies the defaults of ContextOptions (in this one place, for
// every engine) and validates the result against a model of facts f:
// BatchTokens 0 → DefaultBatchTokens, capped at ContextTokens; Threads 0
// → every CPU; DecodeThreads 0 → Threads. A q8_0 KV needs flash
// attention (its V cache is quantized) and a head dimension divisible by
// 32 (ggml quantizes rows head by head in blocks of 32). Failures wrap
// ErrInvalidArgument.
func (o ContextOptions) Resolve(f Facts) (ContextOptions, error) {
	if o.ContextTokens <= 0 {
		return o, fmt.Errorf("%w: context of %d tokens", ErrInvalidArgument, o.ContextTokens)
	}
	if o.BatchTokens <= 0 {
		o.BatchTokens = DefaultBatchTokens
	}
	o.BatchTokens = min(o.BatchTokens, o.ContextTokens)
	if o.Threads <= 0 {
		o.Threads = runtime.NumCPU()
	}
	if o.DecodeThreads <= 0 {
		o.DecodeThreads = o.Threads
	}
	switch o.KVType {
	case policy.KVTypeF16, policy.KVTypeF32:
	case policy.KVTypeQ8_0:
		if !o.FlashAttention {
			return o, fmt.Errorf("%w: q8_0 KV needs flash attention (the V cache is quantized)", ErrInvalidArgument)
		}
		if f.HeadDim%32 != 0 {
			return o, fmt.Errorf("%w: q8_0 KV needs a head dimension divisible by 32; this model's is %d", ErrInvalidArgument, f.HeadDim)
		}
	default:
		return o, fmt.Errorf("%w: KV type %v", ErrInvalidArgument, o.KVType)
	}
	return o, nil
}
