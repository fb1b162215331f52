package llama

import (
	"context"
	"fmt"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
)

// Tensor names llama.cpp's graph builders give the attention projections
// of layer il ("Qcur-<il>", "Kcur-<il>"); each name is set on the
// projection, on its bias sum and on the RoPE result.
const (
	queryTensor = "Qcur"
	keyTensor   = "Kcur"
)

// DecodeCapture is Decode that also returns the pre-RoPE attention
// queries of the last `last` tokens for layers (nil: all), Heads =
// Facts.Heads, through llama.cpp's graph callback. Decode's contract
// holds: on an error or cancellation nothing of the call stays in the KV.
// The result is last × layers × Heads × HeadDim float32s, written by the
// callback straight into the returned slice; a batch without wanted
// tokens runs disarmed.
func (c *Context) DecodeCapture(ctx context.Context, tokens []engine.Token, pos0, last int, layers []int) (policy.HeadVectors, error) {
	return c.decodeCapture(ctx, queryTensor, c.model.facts.Heads, tokens, pos0, last, layers)
}

// decodeKeysForTest is DecodeCapture for the pre-RoPE keys ("Kcur",
// Heads = KVHeads): what RangeKeys must reproduce from the KV bytes.
func (c *Context) decodeKeysForTest(ctx context.Context, tokens []engine.Token, pos0, last int, layers []int) (policy.HeadVectors, error) {
	return c.decodeCapture(ctx, keyTensor, c.model.facts.KVHeads, tokens, pos0, last, layers)
}

func (c *Context) decodeCapture(ctx context.Context, prefix string, heads int, tokens []engine.Token, pos0, last int, layers []int) (policy.HeadVectors, error) {
	if err := c.checkDecode(ctx, tokens, pos0); err != nil {
		return policy.HeadVectors{}, err
	}
	if last <= 0 || last > len(tokens) {
		return policy.HeadVectors{}, fmt.Errorf("%w: capture of the last %d of %d tokens", engine.ErrInvalidArgument, last, len(tokens))
	}
	ids, err := c.model.layerIDs(layers)
	if err != nil {
		return policy.HeadVectors{}, err
	}
	k, err := c.startCapture(captureSpec{Prefix: prefix, Layers: ids, Heads: heads, Last: last}, len(tokens), c.opts.BatchTokens)
	if err != nil {
		return policy.HeadVectors{}, err
	}
	if err := c.decode(ctx, tokens, pos0, k); err != nil {
		k.abandon()
		return policy.HeadVectors{}, err
	}
	v := policy.HeadVectors{
		Rows: last, Layers: len(ids), Heads: heads, Dim: c.model.facts.HeadDim,
		Data: k.finish(),
	}
	if layers != nil {
		v.LayerIDs = append([]int(nil), layers...)
	}
	return v, nil
}

// layerIDs resolves a layer selection: nil is every layer in order; ids
// must be distinct layers of the model.
func (md *Model) layerIDs(layers []int) ([]int, error) {
	n := md.facts.Layers
	if layers == nil {
		ids := make([]int, n)
		for i := range ids {
			ids[i] = i
		}
		return ids, nil
	}
	if len(layers) == 0 {
		return nil, fmt.Errorf("%w: an empty layer selection (nil selects all)", engine.ErrInvalidArgument)
	}
	seen := make([]bool, n)
	for _, l := range layers {
		if l < 0 || l >= n {
			return nil, fmt.Errorf("%w: layer %d of a %d-layer model", engine.ErrInvalidArgument, l, n)
		}
		if seen[l] {
			return nil, fmt.Errorf("%w: layer %d selected twice", engine.ErrInvalidArgument, l)
		}
		seen[l] = true
	}
	return layers, nil
}

// RangeKeys reads the keys of r (a range made by this context's
// ExtractRange) for layers (nil: all), one row per token in position
// order, Heads = KVHeads, with the RoPE rotation of each token's stored
// position undone. It only reads r.
func (c *Context) RangeKeys(r engine.Range, layers []int) (policy.HeadVectors, error) {
	if c.closed {
		return policy.HeadVectors{}, engine.ErrClosed
	}
	ids, err := c.model.layerIDs(layers)
	if err != nil {
		return policy.HeadVectors{}, err
	}
	rope, err := c.model.ropeParams()
	if err != nil {
		return policy.HeadVectors{}, err
	}
	f := c.model.facts
	kb, err := parseKeys(r.Blob, f.Layers, f.KVHeads*f.HeadDim)
	if err != nil {
		return policy.HeadVectors{}, fmt.Errorf("%w: %w", engine.ErrInvalidArgument, err)
	}
	if r.Count <= 0 || kb.cells() != r.Count {
		return policy.HeadVectors{}, fmt.Errorf("%w: range of %d tokens holds %d cells", engine.ErrInvalidArgument, r.Count, kb.cells())
	}
	order, err := kb.positionOrder(r.Pos0)
	if err != nil {
		return policy.HeadVectors{}, fmt.Errorf("%w: %w", engine.ErrInvalidArgument, err)
	}
	v := policy.HeadVectors{Rows: r.Count, Layers: len(ids), Heads: f.KVHeads, Dim: f.HeadDim}
	if layers != nil {
		v.LayerIDs = append([]int(nil), layers...)
	}
	v.Data = make([]float32, v.Rows*v.Layers*v.Heads*v.Dim)
	rowF := f.KVHeads * f.HeadDim
	layer := make([]float32, kb.cells()*rowF)
	tab := rope.table(r.Pos0, r.Count)
	for li, l := range ids {
		if err := kb.toFloat(l, layer); err != nil {
			return policy.HeadVectors{}, fmt.Errorf("%w: %w", engine.ErrInvalidArgument, err)
		}
		for row, cell := range order {
			dst := v.Data[(row*v.Layers+li)*rowF : (row*v.Layers+li+1)*rowF]
			copy(dst, layer[cell*rowF:(cell+1)*rowF])
			tab.undo(dst, row, f.KVHeads, f.HeadDim)
		}
	}
	return v, nil
}

var (
	_ engine.QueryCapturer = (*Context)(nil)
	_ engine.KeyReader     = (*Context)(nil)
)
