package llama

/*
#include "llama.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/gguf"
)

// ropeKind is how a model pairs the dimensions RoPE rotates.
type ropeKind int

const (
	ropeNone ropeKind = iota // no rotation
	ropeNorm                 // adjacent pairs (x[2i], x[2i+1])
	ropeNeox                 // halves (x[i], x[i+n_rot/2])
)

// rope is the rotation a model's keys got in the KV cache: the parameters
// llama.cpp's graph passes to ggml_rope_ext for a plain (non-YaRN,
// single-section) RoPE.
type rope struct {
	kind    ropeKind
	nRot    int       // rotated dimensions of each head (even, ≤ head dim)
	base    float32   // freq_base
	scale   float32   // freq_scale (linear scaling)
	factors []float32 // per-pair frequency divisors (rope_freqs.weight), or nil
}

// ropeParams reads the model's RoPE once (llama.cpp's accessors, then the
// GGUF metadata the loader reads with its defaults). A variant it does not
// reproduce exactly (YaRN, LongRoPE, multi-section, vision, an attention
// factor) is an ErrInvalidArgument: wrong keys are worse than none.
func (md *Model) ropeParams() (rope, error) {
	md.ropeOnce.Do(func() { md.rope, md.ropeErr = md.readRope() })
	return md.rope, md.ropeErr
}

func (md *Model) readRope() (rope, error) {
	if err := md.alive(); err != nil {
		return rope{}, err
	}
	var r rope
	switch t := C.llama_model_rope_type(md.m); t {
	case C.LLAMA_ROPE_TYPE_NONE:
		return rope{kind: ropeNone}, nil
	case C.LLAMA_ROPE_TYPE_NORM:
		r.kind = ropeNorm
	case C.LLAMA_ROPE_TYPE_NEOX:
		r.kind = ropeNeox
	default:
		return rope{}, fmt.Errorf("%w: rope type %d (multi-section or vision RoPE) is not undone by RangeKeys", engine.ErrInvalidArgument, int(t))
	}
	r.scale = float32(C.llama_model_rope_freq_scale_train(md.m))
	f, err := gguf.Open(md.facts.Path)
	if err != nil {
		return rope{}, fmt.Errorf("%w: reading RoPE parameters: %w", engine.ErrBadModel, err)
	}
	arch, _ := f.String("general.architecture")
	key := func(k string) string { return arch + ".rope." + k }
	r.nRot = md.facts.HeadDim
	if v, ok := f.Uint(key("dimension_count")); ok {
		r.nRot = int(v)
	}
	if r.nRot <= 0 || r.nRot%2 != 0 || r.nRot > md.facts.HeadDim {
		return rope{}, fmt.Errorf("%w: RoPE over %d of %d head dimensions", engine.ErrInvalidArgument, r.nRot, md.facts.HeadDim)
	}
	r.base = 10000 // llama.cpp's default (llama_model::load_hparams)
	if v, ok := f.Get(key("freq_base")); ok {
		x, isF := v.(float32)
		if !isF || !(x > 0) {
			return rope{}, fmt.Errorf("%w: %s = %v", engine.ErrInvalidArgument, key("freq_base"), v)
		}
		r.base = x
	}
	if s, ok := f.String(key("scaling.type")); ok && s != "none" && s != "linear" {
		return rope{}, fmt.Errorf("%w: RoPE scaling %q is not undone by RangeKeys (only none and linear)", engine.ErrInvalidArgument, s)
	}
	if v, ok := f.Get(key("scaling.attn_factor")); ok {
		if x, isF := v.(float32); !isF || x != 1 {
			return rope{}, fmt.Errorf("%w: RoPE attention factor %v is not undone by RangeKeys", engine.ErrInvalidArgument, v)
		}
	}
	for _, name := range []string{"rope_factors_long.weight", "rope_factors_short.weight"} {
		if _, ok := f.Tensor(name); ok {
			return rope{}, fmt.Errorf("%w: LongRoPE (%s) is not undone by RangeKeys", engine.ErrInvalidArgument, name)
		}
	}
	if ti, ok := f.Tensor("rope_freqs.weight"); ok {
		if r.factors, err = readFreqFactors(md.facts.Path, f, ti, r.nRot/2); err != nil {
			return rope{}, err
		}
	}
	return r, nil
}

// readFreqFactors reads the f32 frequency divisors of rope_freqs.weight
// (Llama 3's long-context RoPE), which ggml applies per rotated pair.
func readFreqFactors(path string, f *gguf.File, ti gguf.TensorInfo, pairs int) ([]float32, error) {
	if ti.Type != gguf.TensorF32 || ti.Elements() < uint64(pairs) {
		return nil, fmt.Errorf("%w: rope_freqs.weight of type %v and %d values for %d pairs", engine.ErrInvalidArgument, ti.Type, ti.Elements(), pairs)
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", engine.ErrBadModel, err)
	}
	defer fh.Close()
	sr, err := f.TensorData(fh, ti.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", engine.ErrBadModel, err)
	}
	buf := make([]byte, 4*pairs)
	if _, err := io.ReadFull(sr, buf); err != nil {
		return nil, fmt.Errorf("%w: reading rope_freqs.weight: %w", engine.ErrBadModel, err)
	}
	out := make([]float32, pairs)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
		if !(out[i] > 0) {
			return nil, fmt.Errorf("%w: rope_freqs.weight[%d] = %v", engine.ErrInvalidArgument, i, out[i])
		}
	}
	return out, nil
}

// ropeTable holds cos and sin of every rotated pair for rows consecutive
// positions.
type ropeTable struct {
	r    rope
	half int       // rotated pairs per head
	cs   []float32 // [row][pair]{cos, sin}
}

// table computes the rotation of positions pos0 … pos0+rows-1 as ggml's
// CPU kernel does (ggml_rope_cache_init: the angle in float32, multiplied
// by theta_scale pair after pair), so undoing it is exact up to the
// rounding of the stored K.
func (r rope) table(pos0, rows int) ropeTable {
	t := ropeTable{r: r}
	if r.kind == ropeNone {
		return t
	}
	t.half = r.nRot / 2
	t.cs = make([]float32, rows*t.half*2)
	thetaScale := float32(math.Pow(float64(r.base), float64(float32(-2.0)/float32(r.nRot))))
	for row := 0; row < rows; row++ {
		theta := float32(pos0 + row)
		cs := t.cs[row*t.half*2 : (row+1)*t.half*2]
		for i := 0; i < t.half; i++ {
			x := theta
			if r.factors != nil {
				x = theta / r.factors[i]
			}
			x = r.scale * x
			cs[2*i] = float32(math.Cos(float64(x)))
			cs[2*i+1] = float32(math.Sin(float64(x)))
			theta *= thetaScale
		}
	}
	return t
}

// undo rotates the heads×dim vector v (one token's key) back by the
// angles of row.
func (t ropeTable) undo(v []float32, row, heads, dim int) {
	if t.half == 0 {
		return
	}
	cs := t.cs[row*t.half*2 : (row+1)*t.half*2]
	half := t.half
	for h := 0; h < heads; h++ {
		x := v[h*dim : (h+1)*dim]
		if t.r.kind == ropeNeox {
			lo, hi := x[:half], x[half:2*half]
			for i := range lo {
				c, s := cs[2*i], cs[2*i+1]
				y0, y1 := lo[i], hi[i]
				lo[i] = y0*c + y1*s
				hi[i] = y1*c - y0*s
			}
			continue
		}
		x = x[:2*half]
		for i := 0; i < half; i++ {
			c, s := cs[2*i], cs[2*i+1]
			y0, y1 := x[2*i], x[2*i+1]
			x[2*i] = y0*c + y1*s
			x[2*i+1] = y1*c - y0*s
		}
	}
}
