package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/internal/testmodel"
)

// TestStories260K reads the real model, dumps its keys and tensors, checks
// what llama.cpp reads from it, and writes it back byte for byte.
func TestStories260K(t *testing.T) {
	path := testmodel.Stories(t)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range f.KV {
		if a, ok := kv.Value.(Array); ok {
			t.Logf("kv %-40s array of %d %s", kv.Key, len(a.Items), a.Elem)
		} else {
			t.Logf("kv %-40s %T %v", kv.Key, kv.Value, kv.Value)
		}
	}
	for _, ti := range f.Tensors {
		t.Logf("tensor %-28s %-4s %v @%d", ti.Name, ti.Type, ti.Dims, ti.Offset)
	}
	if f.Version != 3 || f.Alignment != DefaultAlignment {
		t.Fatalf("version %d alignment %d", f.Version, f.Alignment)
	}
	if arch, _ := f.String("general.architecture"); arch != "llama" {
		t.Fatalf("architecture %q", arch)
	}
	if n, _ := f.Uint("llama.block_count"); n != 5 {
		t.Fatalf("block_count %d", n)
	}
	tokens, _ := f.Get("tokenizer.ggml.tokens")
	toks, ok := tokens.(Array).Strings()
	if !ok || len(toks) != 512 {
		t.Fatalf("tokens: %d", len(toks))
	}
	emb, ok := f.Tensor("token_embd.weight")
	embd, _ := f.Uint("llama.embedding_length")
	if !ok || !reflect.DeepEqual(emb.Dims, []uint64{embd, 512}) {
		t.Fatalf("token_embd %+v (embd %d)", emb, embd)
	}
	// 5 blocks × 9 tensors + token_embd + output_norm (+ output if untied).
	if len(f.Tensors) < 47 {
		t.Fatalf("%d tensors", len(f.Tensors))
	}

	// Rewrite: same header, same data, same bytes.
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w, err := NewWriter(&out, f.KV, f.Tensors)
	if err != nil {
		t.Fatal(err)
	}
	if w.HeaderSize() != uint64(f.DataOffset) {
		t.Fatalf("header %d bytes, original %d", w.HeaderSize(), f.DataOffset)
	}
	if !reflect.DeepEqual(w.Tensors(), f.Tensors) {
		t.Fatal("recomputed offsets differ from the file's")
	}
	ra := bytes.NewReader(orig)
	for _, ti := range f.Tensors {
		sr, err := f.TensorData(ra, ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteTensor(sr); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Size() != uint64(out.Len()) {
		t.Fatalf("Size %d, wrote %d", w.Size(), out.Len())
	}
	if !bytes.Equal(out.Bytes(), orig) {
		t.Fatalf("rewrite differs (%d vs %d bytes)", out.Len(), len(orig))
	}
}

func allValues() []KV {
	return []KV{
		{"u8", uint8(200)}, {"i8", int8(-100)}, {"u16", uint16(60000)}, {"i16", int16(-30000)},
		{"u32", uint32(4e9)}, {"i32", int32(-2e9)}, {"f32", float32(1.5)}, {"bool.t", true}, {"bool.f", false},
		{"str", "héllo"}, {"empty", ""}, {"u64", uint64(math.MaxUint64)}, {"i64", int64(math.MinInt64)}, {"f64", math.Pi},
		{"arr.str", Array{Elem: TypeString, Items: []any{"a", "", "ccc"}}},
		{"arr.f32", Array{Elem: TypeFloat32, Items: []any{float32(-1), float32(0.25)}}},
		{"arr.i32", Array{Elem: TypeInt32, Items: []any{int32(1), int32(-2), int32(3)}}},
		{"arr.empty", Array{Elem: TypeUint8, Items: []any{}}},
		{"arr.nested", Array{Elem: TypeArray, Items: []any{
			Array{Elem: TypeBool, Items: []any{true, false}},
			Array{Elem: TypeUint64, Items: []any{uint64(7)}},
		}}},
	}
}

// writeFile writes kvs and tensors whose data are bytes i%251 in order.
func writeFile(t *testing.T, kvs []KV, ts []TensorInfo) []byte {
	t.Helper()
	var out bytes.Buffer
	w, err := NewWriter(&out, kvs, ts)
	if err != nil {
		t.Fatal(err)
	}
	for {
		ti, ok := w.Next()
		if !ok {
			break
		}
		n, _ := ti.Size()
		if err := w.WriteTensor(bytes.NewReader(pattern(ti.Name, int(n)))); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Size() != uint64(out.Len()) {
		t.Fatalf("Size %d, wrote %d", w.Size(), out.Len())
	}
	return out.Bytes()
}

func pattern(name string, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i%251) ^ name[0]
	}
	return b
}

func TestRoundTripAllTypes(t *testing.T) {
	for _, align := range []uint32{0, 8, 64} {
		t.Run(fmt.Sprint("align", align), func(t *testing.T) {
			kvs := allValues()
			want := uint64(DefaultAlignment)
			if align != 0 {
				kvs = append(kvs, KV{KeyAlignment, align})
				want = uint64(align)
			}
			ts := []TensorInfo{
				{Name: "a", Dims: []uint64{3}, Type: TensorF32},
				{Name: "b", Dims: []uint64{5, 3}, Type: TensorF16},
				{Name: "c", Dims: []uint64{64, 2, 1, 2}, Type: TensorQ8_0},
				{Name: "d", Dims: []uint64{1}, Type: TensorI8},
			}
			raw := writeFile(t, kvs, ts)
			f, err := Read(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			if f.Alignment != want || f.DataOffset%int64(want) != 0 {
				t.Fatalf("alignment %d, data at %d", f.Alignment, f.DataOffset)
			}
			if !reflect.DeepEqual(f.KV, kvs) {
				t.Fatalf("metadata:\n got %#v\nwant %#v", f.KV, kvs)
			}
			if err := f.CheckSize(int64(len(raw))); err != nil {
				t.Fatal(err)
			}
			for i, ti := range f.Tensors {
				if ti.Name != ts[i].Name || ti.Type != ts[i].Type || !reflect.DeepEqual(ti.Dims, ts[i].Dims) || ti.Offset%want != 0 {
					t.Fatalf("tensor %d: %+v", i, ti)
				}
				sr, _ := f.TensorData(bytes.NewReader(raw), ti.Name)
				data, _ := io.ReadAll(sr)
				n, _ := ti.Size()
				if !bytes.Equal(data, pattern(ti.Name, int(n))) {
					t.Fatalf("tensor %s data differs", ti.Name)
				}
			}
			// Write what was read: the same bytes.
			if again := writeFile(t, f.KV, f.Tensors); !bytes.Equal(again, raw) {
				t.Fatal("second write differs")
			}
		})
	}
}

func TestTensorSizes(t *testing.T) {
	for _, c := range []struct {
		ti   TensorInfo
		want uint64
	}{
		{TensorInfo{Dims: []uint64{896, 512}, Type: TensorF16}, 896 * 512 * 2},
		{TensorInfo{Dims: []uint64{64}, Type: TensorF32}, 256},
		{TensorInfo{Dims: []uint64{64, 3}, Type: TensorQ4_0}, 6 * 18},
		{TensorInfo{Dims: []uint64{512, 2}, Type: TensorQ6_K}, 4 * 210},
	} {
		if got, err := c.ti.Size(); err != nil || got != c.want {
			t.Fatalf("%v %v: %d %v, want %d", c.ti.Type, c.ti.Dims, got, err, c.want)
		}
	}
	for _, bad := range []TensorInfo{
		{Name: "partial block", Dims: []uint64{33}, Type: TensorQ8_0},
		{Name: "zero", Dims: []uint64{4, 0}, Type: TensorF32},
		{Name: "no dims", Type: TensorF32},
		{Name: "five dims", Dims: []uint64{1, 1, 1, 1, 1}, Type: TensorF32},
		{Name: "unknown type", Dims: []uint64{4}, Type: 31},
		{Name: "overflow", Dims: []uint64{1 << 40, 1 << 40}, Type: TensorF32},
	} {
		if _, err := bad.Size(); err == nil {
			t.Fatalf("%s: no error", bad.Name)
		}
	}
}

func TestWriterRejects(t *testing.T) {
	ok := []TensorInfo{{Name: "a", Dims: []uint64{4}, Type: TensorF32}}
	for name, c := range map[string]struct {
		kvs []KV
		ts  []TensorInfo
	}{
		"go type":        {[]KV{{"x", 3}}, ok},
		"mixed array":    {[]KV{{"x", Array{Elem: TypeInt32, Items: []any{int32(1), int64(2)}}}}, ok},
		"bad elem":       {[]KV{{"x", Array{Elem: 42}}}, ok},
		"duplicate key":  {[]KV{{"x", true}, {"x", false}}, ok},
		"alignment type": {[]KV{{KeyAlignment, uint64(32)}}, ok},
		"alignment 48":   {[]KV{{KeyAlignment, uint32(48)}}, ok},
		"dup tensor":     {nil, append(ok, ok[0])},
		"bad tensor":     {nil, []TensorInfo{{Name: "q", Dims: []uint64{31}, Type: TensorQ4_0}}},
	} {
		if _, err := NewWriter(io.Discard, c.kvs, c.ts); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	w, err := NewWriter(io.Discard, nil, ok)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("close with a tensor missing: %v", err)
	}
	if err := w.WriteTensor(bytes.NewReader(make([]byte, 15))); !errors.Is(err, ErrInvalid) {
		t.Fatalf("short data: %v", err)
	}
	w, _ = NewWriter(io.Discard, nil, ok)
	if err := w.WriteTensor(bytes.NewReader(make([]byte, 17))); !errors.Is(err, ErrInvalid) {
		t.Fatalf("long data: %v", err)
	}
}

func TestReadRejectsBadInput(t *testing.T) {
	good := writeFile(t, allValues(), []TensorInfo{{Name: "w", Dims: []uint64{8, 2}, Type: TensorF16}})
	f, err := Read(bytes.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	// Every truncation of the header fails cleanly.
	for n := 0; n < int(f.DataOffset); n += 7 {
		if _, err := Read(bytes.NewReader(good[:n])); err == nil {
			t.Fatalf("truncated at %d: no error", n)
		} else if n >= 4 && !errors.Is(err, ErrFormat) {
			t.Fatalf("truncated at %d: %v", n, err)
		}
	}
	if err := f.CheckSize(int64(len(good) - 40)); !errors.Is(err, ErrFormat) {
		t.Fatalf("short data: %v", err)
	}
	patch := func(off int, v []byte) []byte {
		b := append([]byte(nil), good...)
		copy(b[off:], v)
		return b
	}
	le32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	le64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	firstKeyLen := 4 + 4 + 8 + 8
	cases := map[string]struct {
		raw  []byte
		want error
	}{
		"magic":         {patch(0, []byte("GGUG")), ErrNotGGUF},
		"version 1":     {patch(4, le32(1)), ErrVersion},
		"huge kv count": {patch(16, le64(1<<40)), ErrFormat},
		"huge string":   {patch(firstKeyLen, le64(1<<50)), ErrFormat},
		"bad type":      {patch(firstKeyLen+8+2, le32(77)), ErrFormat},
	}
	for name, c := range cases {
		if _, err := Read(bytes.NewReader(c.raw)); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	// A misaligned tensor offset.
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, nil, []TensorInfo{{Name: "w", Dims: []uint64{8}, Type: TensorF32}})
	w.WriteTensor(bytes.NewReader(make([]byte, 32)))
	w.Close()
	raw := buf.Bytes()
	offAt := 24 + 8 + 1 + 4 + 8 + 4 // header, name "w", dims, ne0, type
	raw[offAt] = 4
	if _, err := Read(bytes.NewReader(raw)); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "alignment") {
		t.Fatalf("misaligned: %v", err)
	}
	// Open: a missing file and a truncated one.
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "none.gguf")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
	trunc := filepath.Join(dir, "t.gguf")
	os.WriteFile(trunc, good[:len(good)-40], 0o600)
	if _, err := Open(trunc); !errors.Is(err, ErrFormat) {
		t.Fatalf("truncated: %v", err)
	}
}

func TestF16(t *testing.T) {
	for _, c := range []struct {
		f float32
		h uint16
	}{
		{0, 0}, {float32(math.Copysign(0, -1)), 0x8000}, {1, 0x3c00}, {-2, 0xc000}, {0.5, 0x3800},
		{65504, 0x7bff}, {65520, 0x7c00}, {1e9, 0x7c00}, {float32(math.Inf(-1)), 0xfc00},
		{6.103515625e-05, 0x0400}, {5.960464477539063e-08, 0x0001}, // smallest normal, smallest subnormal
		{2.98e-08, 0x0000}, {3.0e-08, 0x0001}, // just below and above half the smallest subnormal
		{0.1, 0x2e66}, {0.02, 0x251f}, {1.0009765625, 0x3c01},
		{1.00048828125, 0x3c00}, {1.00146484375, 0x3c02}, // ties to even, down and up
	} {
		if got := F16(c.f); got != c.h {
			t.Errorf("F16(%g) = %#04x, want %#04x", c.f, got, c.h)
		}
	}
	if h := F16(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Fatalf("NaN → %#04x", h)
	}
	// Every finite half survives half → float32 → half.
	for h := 0; h < 1<<16; h++ {
		if h&0x7c00 == 0x7c00 {
			continue
		}
		if got := F16(F32FromF16(uint16(h))); got != uint16(h) {
			t.Fatalf("%#04x → %g → %#04x", h, F32FromF16(uint16(h)), got)
		}
	}
}
