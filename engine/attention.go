package engine

import (
	"context"

	"github.com/ctxd/ctxd/policy"
)

// The two optional interfaces below give an attention-based retrieval
// scorer the model's own vectors. A Context that implements neither still
// serves everything else; callers check with a type assertion.

// QueryCapturer is implemented by contexts that can capture the attention
// queries of the tokens they decode.
type QueryCapturer interface {
	// DecodeCapture is Decode that also returns, for the last `last`
	// tokens of the call (0 < last ≤ len(tokens)), the attention query of
	// every head in the given layers (nil: all) as computed before RoPE is
	// applied (HeadVectors.Rows = last, Heads = Facts.Heads). Errors and
	// cancellation behave as Decode's: nothing of the call stays in the KV.
	DecodeCapture(ctx context.Context, tokens []Token, pos0, last int, layers []int) (policy.HeadVectors, error)
}

// KeyReader is implemented by contexts that can read keys out of the
// range blobs they extract.
type KeyReader interface {
	// RangeKeys returns the keys held in r.Blob, one row per token in
	// position order, for the given layers (nil: all), each KV head's key
	// with the RoPE rotation of the position the token had when r was
	// extracted undone (Heads = Facts.KVHeads). It only reads r; a blob
	// that does not parse as this context's ranges gives
	// ErrInvalidArgument.
	RangeKeys(r Range, layers []int) (policy.HeadVectors, error)
}
