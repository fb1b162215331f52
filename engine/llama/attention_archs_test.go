package llama

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/gguf"
	"github.com/ctxd/ctxd/internal/testmodel"
)

// synthTensor is an f32 tensor added to a synthesized model.
type synthTensor struct {
	name string
	vals []float32
}

// synthArch writes stories260K's weights and vocabulary relabelled as
// arch (its llama.* keys renamed, rope.freq_base set, keys added: names
// without the arch prefix) with extra tensors per layer, for graphs the test models do not have: Qwen2's projection
// biases, Qwen3's per-head norms, NEOX RoPE. Its text is nonsense; its
// tensors are real llama.cpp graphs.
func synthArch(t *testing.T, arch string, freqBase float32, keys map[string]any, extra func(layer int) []synthTensor) string {
	t.Helper()
	src := testmodel.Stories(t)
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	var kvs []gguf.KV
	for _, kv := range f.KV {
		switch {
		case kv.Key == "general.architecture":
			kv.Value = arch
		case strings.HasPrefix(kv.Key, "llama."):
			kv.Key = arch + "." + strings.TrimPrefix(kv.Key, "llama.")
		}
		kvs = append(kvs, kv)
	}
	kvs = append(kvs, gguf.KV{Key: arch + ".rope.freq_base", Value: freqBase})
	for k, v := range keys {
		kvs = append(kvs, gguf.KV{Key: arch + "." + k, Value: v})
	}
	layers, _ := f.Uint("llama.block_count")
	tensors := append([]gguf.TensorInfo(nil), f.Tensors...)
	data := map[string][]byte{}
	for l := 0; l < int(layers); l++ {
		for _, x := range extra(l) {
			b := make([]byte, 0, 4*len(x.vals))
			for _, v := range x.vals {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
			}
			data[x.name] = b
			tensors = append(tensors, gguf.TensorInfo{Name: x.name, Dims: []uint64{uint64(len(x.vals))}, Type: gguf.TensorF32})
		}
	}
	path := filepath.Join(t.TempDir(), arch+".gguf")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	w, err := gguf.NewWriter(out, kvs, tensors)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range tensors {
		var r io.Reader
		if b, ok := data[ti.Name]; ok {
			r = bytes.NewReader(b)
		} else if r, err = f.TensorData(bytes.NewReader(raw), ti.Name); err != nil {
			t.Fatal(err)
		}
		if err := w.WriteTensor(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// ramp is n values around 1 (or around 0 with scale only), varied so that
// a wrong pairing or a missed tensor shows.
func ramp(n int, base, scale float32, seed int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = base + scale*float32(math.Sin(float64(i*7+seed*13)))
	}
	return v
}

// TestCaptureOtherGraphs runs the capture and key checks on graphs
// llama.cpp builds for other architectures: Qwen2 (bias sums after the
// projections: the capture must take the sum) and Qwen3 (a per-head RMS
// norm before RoPE, "Qcur_normed"), both with NEOX RoPE and a non-default
// freq_base read from the metadata.
func TestCaptureOtherGraphs(t *testing.T) {
	for _, tc := range []struct {
		arch  string
		extra func(l int) []synthTensor
	}{
		{"qwen2", func(l int) []synthTensor {
			p := "blk." + strconv.Itoa(l) + "."
			return []synthTensor{{p + "attn_q.bias", ramp(64, 0, 0.3, l)}, {p + "attn_k.bias", ramp(32, 0, 0.3, l+1)}, {p + "attn_v.bias", ramp(32, 0, 0.3, l+2)}}
		}},
		{"qwen3", func(l int) []synthTensor {
			p := "blk." + strconv.Itoa(l) + "."
			return []synthTensor{{p + "attn_q_norm.weight", ramp(8, 1, 0.5, l)}, {p + "attn_k_norm.weight", ramp(8, 1, 0.5, l+3)}}
		}},
	} {
		t.Run(tc.arch, func(t *testing.T) {
			m := loadOnTestBackend(t, synthArch(t, tc.arch, 1e6, nil, tc.extra))
			rp, err := m.ropeParams()
			if err != nil {
				t.Fatal(err)
			}
			if rp.kind != ropeNeox || rp.base != 1e6 || rp.nRot != 8 {
				t.Fatalf("rope %+v, want NEOX, base 1e6, 8 dims", rp)
			}
			f := m.Facts()
			c := newCtx(t, m, 2048)
			const pos0 = 1500
			toks := randomTokens(20, 100, f.VocabSize)
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
			d := headsDiff(t, want, got)
			t.Logf("%s: RangeKeys vs captured pre-RoPE K at %d: max relative difference %.2g", tc.arch, pos0, d)
			if d > f16Tolerance(t) {
				t.Fatalf("keys differ by %g", d)
			}
			// Queries: captured, and layer 0's free of position and context.
			more := append(randomTokens(21, 9, f.VocabSize), 77)
			qb, err := c.DecodeCapture(t.Context(), more, pos0+len(toks), 1, []int{0})
			if err != nil {
				t.Fatal(err)
			}
			alone := newCtx(t, m, 64)
			qa, err := alone.DecodeCapture(t.Context(), []engine.Token{77}, 0, 1, []int{0})
			if err != nil {
				t.Fatal(err)
			}
			var dq float64
			for h := 0; h < qa.Heads; h++ {
				dq = max(dq, vecDiff(qa.Vec(0, 0, h), qb.Vec(0, 0, h)))
			}
			if dq > queryTolerance(t) {
				t.Fatalf("layer-0 query depends on position or context: %g", dq)
			}
		})
	}
}

// TestRangeKeysRopeVariants: Llama 3's frequency divisors
// (rope_freqs.weight) with linear scaling are undone exactly (checked
// against the keys the graph computed); YaRN is refused with
// ErrInvalidArgument while queries are still captured.
func TestRangeKeysRopeVariants(t *testing.T) {
	freqs := func(l int) []synthTensor {
		if l > 0 {
			return nil
		}
		return []synthTensor{{"rope_freqs.weight", []float32{1, 2, 8, 40}}}
	}
	m := loadOnTestBackend(t, synthArch(t, "llama", 500000, map[string]any{"rope.scaling.type": "linear", "rope.scaling.factor": float32(2)}, freqs))
	rp, err := m.ropeParams()
	if err != nil {
		t.Fatal(err)
	}
	if rp.kind != ropeNorm || len(rp.factors) != 4 || rp.scale != 0.5 {
		t.Fatalf("rope %+v, want NORM, 4 factors, scale 0.5", rp)
	}
	c := newCtx(t, m, 2048)
	toks := randomTokens(22, 100, m.Facts().VocabSize)
	const pos0 = 1800
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
	d := headsDiff(t, want, got)
	t.Logf("rope_freqs + linear scaling: RangeKeys vs captured pre-RoPE K at %d: max relative difference %.2g", pos0, d)
	if d > f16Tolerance(t) {
		t.Fatalf("keys differ by %g", d)
	}

	yarn := loadOnTestBackend(t, synthArch(t, "llama", 10000, map[string]any{"rope.scaling.type": "yarn", "rope.scaling.factor": float32(4), "rope.scaling.original_context_length": uint32(512)}, func(int) []synthTensor { return nil }))
	cy := newCtx(t, yarn, 512)
	if _, err := cy.DecodeCapture(t.Context(), toks, 0, 4, nil); err != nil {
		t.Fatalf("queries of a YaRN model: %v", err)
	}
	ry, err := cy.ExtractRange(0, len(toks))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cy.RangeKeys(ry, nil); !errors.Is(err, engine.ErrInvalidArgument) || !strings.Contains(err.Error(), "yarn") {
		t.Fatalf("YaRN keys: err = %v, want ErrInvalidArgument naming yarn", err)
	}
}

// TestCaptureRefusesUnmatchedGraphs: a tensor name whose rows never feed a
// RoPE node (V, or a norm of the residual stream) is refused with
// ErrInvalidArgument, leaving nothing of the call in the KV.
func TestCaptureRefusesUnmatchedGraphs(t *testing.T) {
	m := loadStories(t)
	c := newCtx(t, m, 512)
	toks := randomTokens(23, 100, m.Facts().VocabSize)
	if err := c.Decode(t.Context(), toks[:10], 0); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"Vcur", "attn_norm"} {
		_, err := c.decodeCapture(t.Context(), name, m.Facts().KVHeads, toks[10:], 10, 5, nil)
		if !errors.Is(err, engine.ErrInvalidArgument) {
			t.Fatalf("%s: err = %v, want ErrInvalidArgument", name, err)
		}
		t.Logf("%s: %v", name, err)
		if c.Used() != 10 {
			t.Fatalf("%s: Used = %d after a refused capture", name, c.Used())
		}
	}
	if _, err := c.DecodeCapture(t.Context(), toks[10:], 10, 5, nil); err != nil {
		t.Fatalf("capture after refusals: %v", err)
	}
}
