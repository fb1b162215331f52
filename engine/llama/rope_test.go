package llama

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/ctxd/ctxd/policy"
)

// TestRopeUndoInvertsTheRotation: for both pairings, partial rotation,
// linear scaling and frequency divisors, undo after the rotation (the
// test's reRope, written from ggml's rotate_pairs) gives the vector back,
// and leaves dimensions past n_rot alone.
func TestRopeUndoInvertsTheRotation(t *testing.T) {
	const heads, dim, rows, pos0 = 3, 12, 5, 123456
	for _, r := range []rope{
		{kind: ropeNorm, nRot: 12, base: 10000, scale: 1},
		{kind: ropeNeox, nRot: 8, base: 500000, scale: 0.25, factors: []float32{1, 1.5, 4, 8}},
	} {
		v := policy.HeadVectors{Rows: rows, Layers: 1, Heads: heads, Dim: dim, Data: make([]float32, rows*heads*dim)}
		for i := range v.Data {
			v.Data[i] = float32(math.Sin(float64(i)*0.7)) + 0.1*float32(i%5)
		}
		rot := reRope(r, v, pos0)
		if d := vecDiff(v.Data, rot.Data); d < 0.1 {
			t.Fatalf("%+v: the rotation moved nothing (%g)", r, d)
		}
		tab := r.table(pos0, rows)
		for row := 0; row < rows; row++ {
			tab.undo(rot.Data[row*heads*dim:(row+1)*heads*dim], row, heads, dim)
		}
		if d := vecDiff(v.Data, rot.Data); d > 1e-5 {
			t.Fatalf("%+v: undo after rotate is off by %g", r, d)
		}
		for row := 0; row < rows; row++ {
			for h := 0; h < heads; h++ {
				for i := r.nRot; i < dim; i++ {
					if a, b := v.Vec(row, 0, h)[i], rot.Vec(row, 0, h)[i]; a != b {
						t.Fatalf("%+v: dimension %d past n_rot changed: %v → %v", r, i, a, b)
					}
				}
			}
		}
	}
}

// TestKeyRowsQ8: q8_0 K rows (blocks of an f16 scale and 32 int8) convert
// through ggml's traits; no test model has heads that q8_0 KV accepts.
func TestKeyRowsQ8(t *testing.T) {
	const rowEl = 64 // two blocks
	scales := []float32{0.5, -0.125}
	data := make([]byte, 0, 2*34)
	for b := 0; b < 2; b++ {
		data = binary.LittleEndian.AppendUint16(data, f32ToF16(scales[b]))
		for i := 0; i < 32; i++ {
			data = append(data, byte(int8(i-16)))
		}
	}
	kb := keyBlob{pos: []int32{0}, rowEl: rowEl, layers: []keyLayer{{typ: 8, rowBytes: 68, data: data}}}
	out := make([]float32, rowEl)
	if err := kb.toFloat(0, out); err != nil {
		t.Fatal(err)
	}
	for i, x := range out {
		if want := scales[i/32] * float32(i%32-16); x != want {
			t.Fatalf("value %d = %v, want %v", i, x, want)
		}
	}
	kb.layers[0].typ = 4 // a removed ggml type: no conversion
	if err := kb.toFloat(0, out); err == nil {
		t.Fatal("a type without to_float converted")
	}
}

// f32ToF16 converts values exactly representable in f16 (normal range).
func f32ToF16(x float32) uint16 {
	b := math.Float32bits(x)
	sign := uint16(b>>16) & 0x8000
	exp := int((b>>23)&0xff) - 127 + 15
	mant := uint16((b >> 13) & 0x3ff)
	return sign | uint16(exp)<<10 | mant
}
