package engine

import (
	"context"
	"fmt"
	"strings"
)

// WeightType is a type a model's weights can be quantized to: what users
// download (Q8_0, Q4_K_M, Q4_0) rather than f16.
type WeightType string

// The weight types a Quantizer writes. Tensors whose rows do not fit a
// type's block (k-quants need rows divisible by 256) take the engine's
// fallback type for that tensor, as published quantized files do.
const (
	WeightQ8_0  WeightType = "q8_0"
	WeightQ4_0  WeightType = "q4_0"
	WeightQ4_KM WeightType = "q4_k_m"
)

// WeightTypes lists the weight types in the order they are documented.
var WeightTypes = []WeightType{WeightQ8_0, WeightQ4_KM, WeightQ4_0}

// ParseWeightType reads a weight type's name (any case); an unknown one
// wraps ErrInvalidArgument and names the known ones.
func ParseWeightType(s string) (WeightType, error) {
	t := WeightType(strings.ToLower(s))
	for _, k := range WeightTypes {
		if t == k {
			return k, nil
		}
	}
	names := make([]string, len(WeightTypes))
	for i, k := range WeightTypes {
		names[i] = string(k)
	}
	return "", fmt.Errorf("%w: weight type %q (one of %s)", ErrInvalidArgument, s, strings.Join(names, ", "))
}

// Quantizer is the optional engine contract of writing a model file's
// weights in a smaller type with the engine's own quantizer.
type Quantizer interface {
	// Quantize reads the model at in (f32/f16 weights) and writes it to
	// out with its weights in type to, using up to threads threads (0:
	// all). in must differ from out. A missing input wraps
	// os.ErrNotExist, one the engine cannot quantize wraps ErrBadModel,
	// an unknown type ErrInvalidArgument. ctx is checked before the work
	// starts; the engine's quantizer cannot be interrupted once running.
	// On failure out may be left partly written: callers write to a
	// temporary name and rename.
	Quantize(ctx context.Context, in, out string, to WeightType, threads int) error
}
