package llama

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand"
	"testing"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/policy"
)

// randomTokens returns n token ids in [3, vocab) from seed.
func randomTokens(seed int64, n, vocab int) []engine.Token {
	rng := rand.New(rand.NewSource(seed))
	out := make([]engine.Token, n)
	for i := range out {
		out[i] = engine.Token(3 + rng.Intn(vocab-3))
	}
	return out
}

// vecDiff is the largest difference between a and b relative to the
// largest magnitude in a (0 for two zero vectors).
func vecDiff(a, b []float32) float64 {
	var d, m float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
		m = max(m, math.Abs(float64(a[i])))
	}
	if m == 0 {
		return d
	}
	return d / m
}

// headsDiff is the largest vecDiff over every (row, layer, head) vector.
func headsDiff(t *testing.T, a, b policy.HeadVectors) float64 {
	t.Helper()
	if a.Rows != b.Rows || a.Layers != b.Layers || a.Heads != b.Heads || a.Dim != b.Dim {
		t.Fatalf("shapes %d×%d×%d×%d and %d×%d×%d×%d", a.Rows, a.Layers, a.Heads, a.Dim, b.Rows, b.Layers, b.Heads, b.Dim)
	}
	var d float64
	for r := 0; r < a.Rows; r++ {
		for l := 0; l < a.Layers; l++ {
			for h := 0; h < a.Heads; h++ {
				d = max(d, vecDiff(a.Vec(r, l, h), b.Vec(r, l, h)))
			}
		}
	}
	return d
}

// f16Tolerance bounds the relative difference of keys that went through
// the f16 KV cache (2^-11 rounding, once or twice, plus the float32
// rotation), or 1e-2 on a GPU backend, which computes at its own precision.
func f16Tolerance(t *testing.T) float64 {
	if name, _ := testmodel.Backend(t); name != "" {
		return 1e-2
	}
	return 2e-3
}

// queryTolerance bounds the relative difference of one token's layer-0
// query computed in batches of different sizes: float rounding on the CPU
// (2e-7 measured), a GPU backend's own kernels per batch size otherwise
// (3.2e-4 on Vulkan over lavapipe).
func queryTolerance(t *testing.T) float64 {
	if name, _ := testmodel.Backend(t); name != "" {
		return 2e-3
	}
	return 1e-4
}

func TestDecodeCaptureShape(t *testing.T) {
	m := loadStories(t)
	f := m.Facts()
	c := newCtx(t, m, 512) // batches of 64: the last 70 tokens span two
	toks := randomTokens(1, 150, f.VocabSize)
	all, err := c.DecodeCapture(t.Context(), toks, 0, 70, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := all.Validate(); err != nil {
		t.Fatal(err)
	}
	if all.Rows != 70 || all.Layers != f.Layers || all.Heads != f.Heads || all.Dim != f.HeadDim || all.LayerIDs != nil {
		t.Fatalf("shape %d×%d×%d×%d ids %v, want 70×%d×%d×%d nil", all.Rows, all.Layers, all.Heads, all.Dim, all.LayerIDs, f.Layers, f.Heads, f.HeadDim)
	}
	if c.Used() != len(toks) {
		t.Fatalf("Used = %d after capturing %d tokens", c.Used(), len(toks))
	}
	var zero int
	for _, x := range all.Data {
		if x == 0 {
			zero++
		}
	}
	if zero > len(all.Data)/100 {
		t.Fatalf("%d of %d captured values are 0", zero, len(all.Data))
	}
	// A selection in the caller's order holds the same vectors.
	c2 := newCtx(t, m, 512)
	some, err := c2.DecodeCapture(t.Context(), toks, 0, 70, []int{3, 1})
	if err != nil {
		t.Fatal(err)
	}
	if some.Layers != 2 || len(some.LayerIDs) != 2 || some.LayerIDs[0] != 3 || some.LayerIDs[1] != 1 {
		t.Fatalf("selection shape %d layers, ids %v", some.Layers, some.LayerIDs)
	}
	for r := 0; r < 70; r++ {
		for h := 0; h < f.Heads; h++ {
			if !equalFloats(some.Vec(r, 0, h), all.Vec(r, 3, h)) || !equalFloats(some.Vec(r, 1, h), all.Vec(r, 1, h)) {
				t.Fatalf("row %d head %d: selected layers differ from the full capture", r, h)
			}
		}
	}
}

// TestDecodeCaptureIsDecode: capturing changes nothing of the decode: the
// KV bytes and the logits are those of Decode, bit for bit.
func TestDecodeCaptureIsDecode(t *testing.T) {
	m := loadStories(t)
	toks := randomTokens(2, 150, m.Facts().VocabSize)
	plain := newCtx(t, m, 512)
	if err := plain.Decode(t.Context(), toks, 0); err != nil {
		t.Fatal(err)
	}
	capt := newCtx(t, m, 512)
	if _, err := capt.DecodeCapture(t.Context(), toks, 0, 100, nil); err != nil {
		t.Fatal(err)
	}
	if !equalFloats(plain.Logits(), capt.Logits()) {
		t.Fatalf("logits differ by %g", maxDiff(plain.Logits(), capt.Logits()))
	}
	a, err := plain.ExtractRange(0, len(toks))
	if err != nil {
		t.Fatal(err)
	}
	b, err := capt.ExtractRange(0, len(toks))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Blob, b.Blob) {
		t.Fatal("KV bytes after DecodeCapture differ from those after Decode")
	}
	// And a plain decode after a capture runs disarmed: still equal.
	more := randomTokens(3, 20, m.Facts().VocabSize)
	if err := plain.Decode(t.Context(), more, len(toks)); err != nil {
		t.Fatal(err)
	}
	if err := capt.Decode(t.Context(), more, len(toks)); err != nil {
		t.Fatal(err)
	}
	if !equalFloats(plain.Logits(), capt.Logits()) {
		t.Fatalf("logits of a later Decode differ by %g", maxDiff(plain.Logits(), capt.Logits()))
	}
}

// TestQueriesArePositionFree: a token's layer-0 pre-RoPE query depends on
// the token alone (the projection of its normed embedding), not on its
// position or on what precedes it; a deeper layer's does depend on the
// context, so the capture is not of a constant.
func TestQueriesArePositionFree(t *testing.T) {
	m := loadStories(t)
	vocab := m.Facts().VocabSize
	tok := engine.Token(77)
	alone := newCtx(t, m, 512)
	qa, err := alone.DecodeCapture(t.Context(), []engine.Token{tok}, 0, 1, []int{0, 4})
	if err != nil {
		t.Fatal(err)
	}
	after := newCtx(t, m, 512)
	prefix := randomTokens(4, 37, vocab)
	if err := after.Decode(t.Context(), prefix, 200); err != nil {
		t.Fatal(err)
	}
	qb, err := after.DecodeCapture(t.Context(), append(randomTokens(5, 9, vocab), tok), 237, 1, []int{0, 4})
	if err != nil {
		t.Fatal(err)
	}
	var d0, d4 float64
	for h := 0; h < qa.Heads; h++ {
		d0 = max(d0, vecDiff(qa.Vec(0, 0, h), qb.Vec(0, 0, h)))
		d4 = max(d4, vecDiff(qa.Vec(0, 1, h), qb.Vec(0, 1, h)))
	}
	t.Logf("token %d at 0 alone vs at 246 after 46 tokens: layer-0 queries differ by %.2g, layer-4 by %.2g (relative)", tok, d0, d4)
	if d0 > queryTolerance(t) {
		t.Fatalf("layer-0 query depends on position or context: %g", d0)
	}
	if d4 < 1e-2 {
		t.Fatalf("layer-4 query does not depend on the context (%g): not a query", d4)
	}
}

// errAfter is a context whose Err turns to Canceled after n calls: a
// cancellation at a known point of a decode (Decode asks once before the
// first batch, then after each).
type errAfter struct {
	context.Context
	n int
}

func (e *errAfter) Err() error {
	if e.n--; e.n < 0 {
		return context.Canceled
	}
	return nil
}

func TestDecodeCaptureCancelAndBadArguments(t *testing.T) {
	m := loadStories(t)
	c := newCtx(t, m, 512)
	toks := randomTokens(6, 100, m.Facts().VocabSize)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.DecodeCapture(ctx, toks, 0, 10, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: err = %v", err)
	}
	if c.Used() != 0 {
		t.Fatalf("Used = %d after a cancelled capture", c.Used())
	}
	// Cancelled between batches, after the capture's first rows (the last
	// 100 of 448 tokens start in the sixth batch of 64) were copied.
	long := randomTokens(7, 448, m.Facts().VocabSize)
	if _, err := c.DecodeCapture(&errAfter{Context: t.Context(), n: 6}, long, 0, 100, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled between batches: err = %v", err)
	}
	if c.Used() != 0 {
		t.Fatalf("Used = %d after a capture cancelled between batches", c.Used())
	}
	c.Clear()
	for _, tc := range []struct {
		name   string
		toks   []engine.Token
		pos0   int
		last   int
		layers []int
	}{
		{"no tokens", nil, 0, 1, nil},
		{"last 0", toks, 0, 0, nil},
		{"last > tokens", toks, 0, 101, nil},
		{"negative layer", toks, 0, 5, []int{-1}},
		{"layer past the model", toks, 0, 5, []int{5}},
		{"layer twice", toks, 0, 5, []int{2, 2}},
		{"empty selection", toks, 0, 5, []int{}},
		{"negative position", toks, -1, 5, nil},
		{"token outside the vocabulary", []engine.Token{1, 9999}, 0, 1, nil},
	} {
		if _, err := c.DecodeCapture(t.Context(), tc.toks, tc.pos0, tc.last, tc.layers); !errors.Is(err, engine.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", tc.name, err)
		}
		if c.Used() != 0 {
			t.Fatalf("%s: Used = %d", tc.name, c.Used())
		}
	}
	if err := c.Decode(t.Context(), toks[:10], 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DecodeCapture(t.Context(), toks[:5], 5, 1, nil); !errors.Is(err, engine.ErrInvalidArgument) {
		t.Errorf("occupied positions: err = %v", err)
	}
	if c.Used() != 10 {
		t.Fatalf("Used = %d after refused captures", c.Used())
	}
	// After all the refusals a capture still works.
	if v, err := c.DecodeCapture(t.Context(), toks[10:20], 10, 3, []int{0}); err != nil || v.Rows != 3 {
		t.Fatalf("capture after refusals: %v rows %d", err, v.Rows)
	}
	c.Close()
	if _, err := c.DecodeCapture(t.Context(), toks, 0, 1, nil); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("closed: err = %v", err)
	}
}

// TestRangeKeysAreTheKeys: the keys RangeKeys reads out of the KV bytes
// are the pre-RoPE keys the graph computed (captured with the same
// callback as the queries, from the tensors named Kcur), within the f16
// rounding of the cache, at position 0 and far from it, with V stored
// transposed and (flash attention) not.
func TestRangeKeysAreTheKeys(t *testing.T) {
	m := loadStories(t)
	vocab := m.Facts().VocabSize
	for _, tc := range []struct {
		pos0  int
		flash bool // V not transposed in the blob
	}{{0, false}, {1500, false}, {700, true}} {
		pos0 := tc.pos0
		c, err := m.newContext(engine.ContextOptions{ContextTokens: 2048, BatchTokens: 64, DecodeThreads: 1, FlashAttention: tc.flash})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if pos0 > 0 {
			if err := c.Decode(t.Context(), randomTokens(8, 100, vocab), pos0-100); err != nil {
				t.Fatal(err)
			}
		}
		toks := randomTokens(9, 150, vocab)
		want, err := c.decodeKeysForTest(t.Context(), toks, pos0, len(toks), nil)
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.ExtractRange(pos0, pos0+len(toks))
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.RangeKeys(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := got.Validate(); err != nil {
			t.Fatal(err)
		}
		d := headsDiff(t, want, got)
		t.Logf("pos0 %d flash %v: RangeKeys vs captured pre-RoPE K: max relative difference %.2g", pos0, tc.flash, d)
		if d > f16Tolerance(t) {
			t.Fatalf("pos0 %d: keys differ by %g", pos0, d)
		}
		// The rotation mattered: the stored (roped) keys are far from these.
		if pos0 > 0 {
			if raw := rawKeysDiff(t, c, r, want); raw < 0.1 {
				t.Fatalf("roped keys are within %g of the pre-RoPE ones: nothing was undone", raw)
			}
		}
		sel, err := c.RangeKeys(r, []int{4, 0})
		if err != nil {
			t.Fatal(err)
		}
		for row := 0; row < sel.Rows; row++ {
			for h := 0; h < sel.Heads; h++ {
				if !equalFloats(sel.Vec(row, 0, h), got.Vec(row, 4, h)) || !equalFloats(sel.Vec(row, 1, h), got.Vec(row, 0, h)) {
					t.Fatalf("selected layers differ from the full read at row %d head %d", row, h)
				}
			}
		}
	}
}

// rawKeysDiff compares the keys of r read without undoing RoPE against want.
func rawKeysDiff(t *testing.T, c *Context, r engine.Range, want policy.HeadVectors) float64 {
	f := c.model.facts
	kb, err := parseKeys(r.Blob, f.Layers, f.KVHeads*f.HeadDim)
	if err != nil {
		t.Fatal(err)
	}
	order, err := kb.positionOrder(r.Pos0)
	if err != nil {
		t.Fatal(err)
	}
	rowF := f.KVHeads * f.HeadDim
	layer := make([]float32, kb.cells()*rowF)
	var d float64
	for l := 0; l < f.Layers; l++ {
		if err := kb.toFloat(l, layer); err != nil {
			t.Fatal(err)
		}
		for row, cell := range order {
			for h := 0; h < f.KVHeads; h++ {
				d = max(d, vecDiff(want.Vec(row, l, h), layer[cell*rowF+h*f.HeadDim:cell*rowF+(h+1)*f.HeadDim]))
			}
		}
	}
	return d
}

// TestRangeKeysArePositionFree: the same tokens' keys read from ranges
// extracted at different positions agree: after a shift (the same K
// rotated again in place) within f16 rounding, and decoded afresh at
// another offset (the same relative positions) within float error.
func TestRangeKeysArePositionFree(t *testing.T) {
	m := loadStories(t)
	vocab := m.Facts().VocabSize
	toks := randomTokens(10, 120, vocab)
	c := newCtx(t, m, 2048)
	if err := c.Decode(t.Context(), toks, 0); err != nil {
		t.Fatal(err)
	}
	r0, err := c.ExtractRange(0, len(toks))
	if err != nil {
		t.Fatal(err)
	}
	k0, err := c.RangeKeys(r0, nil)
	if err != nil {
		t.Fatal(err)
	}
	const delta = 777
	if err := c.Shift(0, len(toks), delta); err != nil {
		t.Fatal(err)
	}
	// llama.cpp rotates shifted K at the next decode.
	if err := c.Decode(t.Context(), []engine.Token{5}, len(toks)+delta); err != nil {
		t.Fatal(err)
	}
	r1, err := c.ExtractRange(delta, delta+len(toks))
	if err != nil {
		t.Fatal(err)
	}
	k1, err := c.RangeKeys(r1, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := headsDiff(t, k0, k1)
	t.Logf("keys at 0 vs shifted by %d: max relative difference %.2g", delta, d)
	if d > f16Tolerance(t) {
		t.Fatalf("shifted keys differ by %g", d)
	}
	other := newCtx(t, m, 2048)
	if err := other.Decode(t.Context(), toks, 1200); err != nil {
		t.Fatal(err)
	}
	r2, err := other.ExtractRange(1200, 1200+len(toks))
	if err != nil {
		t.Fatal(err)
	}
	k2, err := other.RangeKeys(r2, nil)
	if err != nil {
		t.Fatal(err)
	}
	d2 := headsDiff(t, k0, k2)
	t.Logf("keys decoded at 0 vs at 1200: max relative difference %.2g", d2)
	if d2 > 2e-2 {
		t.Fatalf("keys decoded at another offset differ by %g", d2)
	}
}

func TestRangeKeysBadRanges(t *testing.T) {
	m := loadStories(t)
	c := newCtx(t, m, 512)
	toks := randomTokens(11, 40, m.Facts().VocabSize)
	if err := c.Decode(t.Context(), toks, 0); err != nil {
		t.Fatal(err)
	}
	r, err := c.ExtractRange(0, 40)
	if err != nil {
		t.Fatal(err)
	}
	orig := append([]byte(nil), r.Blob...)
	bad := func(name string, b engine.Range, layers []int) {
		t.Helper()
		if _, err := c.RangeKeys(b, layers); !errors.Is(err, engine.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", name, err)
		}
	}
	bad("truncated", engine.Range{Pos0: 0, Count: 40, Blob: r.Blob[:len(r.Blob)-1]}, nil)
	bad("trailing byte", engine.Range{Pos0: 0, Count: 40, Blob: append(append([]byte(nil), r.Blob...), 0)}, nil)
	bad("empty", engine.Range{Pos0: 0, Count: 40}, nil)
	bad("garbage", engine.Range{Pos0: 0, Count: 40, Blob: bytes.Repeat([]byte{0xff}, len(r.Blob))}, nil)
	bad("count", engine.Range{Pos0: 0, Count: 39, Blob: r.Blob}, nil)
	bad("positions", engine.Range{Pos0: 1, Count: 40, Blob: r.Blob}, nil)
	bad("layer", r, []int{7})
	// A blob whose K type field is corrupt.
	k := append([]byte(nil), r.Blob...)
	off := 4 + 4 + 40*(4+4+4) + 4 + 4 // n_stream, cells, metadata, v_trans, n_layer
	k[off] = 99
	bad("K type", engine.Range{Pos0: 0, Count: 40, Blob: k}, nil)
	if !bytes.Equal(r.Blob, orig) {
		t.Fatal("RangeKeys wrote to the range")
	}
	want, err := c.RangeKeys(r, nil)
	if err != nil {
		t.Fatalf("the intact range: %v", err)
	}
	// TokenMajor rewrites V only: the same keys come out.
	tm, changed := TokenMajor(r.Blob)
	if !changed {
		t.Fatal("TokenMajor changed nothing (no transposed V?)")
	}
	got, err := c.RangeKeys(engine.Range{Pos0: r.Pos0, Count: r.Count, Blob: tm}, nil)
	if err != nil {
		t.Fatalf("token-major range: %v", err)
	}
	if !equalFloats(want.Data, got.Data) {
		t.Fatal("a token-major range gives other keys")
	}
}

// TestBytesAfterMovesAreRotated: llama.cpp rotates the K of moved cells
// only at the next llama_decode; ranges and saved sequences taken right
// after a Shift or a moving InsertRange still hold correctly rotated K
// (applyShifts): their keys match the unmoved ones, and the bytes decode
// on exactly like the context they came from.
func TestBytesAfterMovesAreRotated(t *testing.T) {
	m := loadStories(t)
	toks := randomTokens(12, 120, m.Facts().VocabSize)
	c := newCtx(t, m, 2048)
	if err := c.Decode(t.Context(), toks, 0); err != nil {
		t.Fatal(err)
	}
	r0, err := c.ExtractRange(0, len(toks))
	if err != nil {
		t.Fatal(err)
	}
	k0, err := c.RangeKeys(r0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Shift(0, len(toks), 500); err != nil {
		t.Fatal(err)
	}
	r1, err := c.ExtractRange(500, 500+len(toks)) // no decode in between
	if err != nil {
		t.Fatal(err)
	}
	k1, err := c.RangeKeys(r1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := headsDiff(t, k0, k1); d > f16Tolerance(t) {
		t.Fatalf("range taken right after a shift: keys differ by %g (K not rotated yet?)", d)
	}
	// A moving insert, then the range at once.
	if err := c.InsertRange(r0, 900); err != nil {
		t.Fatal(err)
	}
	r2, err := c.ExtractRange(900, 900+len(toks))
	if err != nil {
		t.Fatal(err)
	}
	k2, err := c.RangeKeys(r2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := headsDiff(t, k0, k2); d > f16Tolerance(t) {
		t.Fatalf("range taken right after a moving insert: keys differ by %g", d)
	}
	// A sequence saved right after a shift decodes on as the original.
	if _, err := c.Remove(900, -1); err != nil {
		t.Fatal(err)
	}
	if err := c.Shift(500, 500+len(toks), 100); err != nil {
		t.Fatal(err)
	}
	st, err := c.SaveSeq()
	if err != nil {
		t.Fatal(err)
	}
	d := newCtx(t, m, 2048)
	if err := d.LoadSeq(st); err != nil {
		t.Fatal(err)
	}
	next := []engine.Token{5}
	if err := c.Decode(t.Context(), next, 720); err != nil {
		t.Fatal(err)
	}
	if err := d.Decode(t.Context(), next, 720); err != nil {
		t.Fatal(err)
	}
	if !equalFloats(c.Logits(), d.Logits()) {
		t.Fatalf("a sequence saved right after a shift decodes %g away from the original", maxDiff(c.Logits(), d.Logits()))
	}
	// A full cache has no cell for the token that runs the rotation; the
	// rotation runs all the same (before the batch looks for a cell).
	full := newCtx(t, m, len(toks))
	if err := full.Decode(t.Context(), toks, 0); err != nil {
		t.Fatal(err)
	}
	if err := full.Shift(0, len(toks), 300); err != nil {
		t.Fatal(err)
	}
	r3, err := full.ExtractRange(300, 300+len(toks))
	if err != nil {
		t.Fatal(err)
	}
	k3, err := full.RangeKeys(r3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := headsDiff(t, k0, k3); d > f16Tolerance(t) || full.shiftPending {
		t.Fatalf("full cache: keys after a shift differ by %g (pending %v)", d, full.shiftPending)
	}
}
