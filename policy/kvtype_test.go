package policy

import (
	"errors"
	"math"
	"testing"
)

func TestKVTypeNames(t *testing.T) {
	var zero KVType
	if zero != KVTypeF16 {
		t.Fatalf("zero KVType = %v, want f16", zero)
	}
	for _, kt := range []KVType{KVTypeF16, KVTypeQ8_0, KVTypeF32} {
		got, err := ParseKVType(kt.String())
		if err != nil || got != kt {
			t.Errorf("ParseKVType(%q) = %v, %v; want %v", kt.String(), got, err, kt)
		}
	}
	for in, want := range map[string]KVType{"f16": KVTypeF16, "q8_0": KVTypeQ8_0, "q8": KVTypeQ8_0, "f32": KVTypeF32, " Q8_0 ": KVTypeQ8_0, "F16": KVTypeF16} {
		got, err := ParseKVType(in)
		if err != nil || got != want {
			t.Errorf("ParseKVType(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "f8", "q4_0", "bf16"} {
		if _, err := ParseKVType(in); !errors.Is(err, ErrUnknownName) {
			t.Errorf("ParseKVType(%q) err = %v, want ErrUnknownName", in, err)
		}
	}
	if s := KVType(9).String(); s != "KVType(9)" {
		t.Errorf("KVType(9).String() = %q", s)
	}
}

func TestBytesPerElement(t *testing.T) {
	for _, tc := range []struct {
		kt       KVType
		num, den int64
	}{{KVTypeF16, 2, 1}, {KVTypeF32, 4, 1}, {KVTypeQ8_0, 34, 32}, {KVType(-1), 0, 1}} {
		num, den := tc.kt.BytesPerElement()
		if num != tc.num || den != tc.den {
			t.Errorf("%v.BytesPerElement() = %d/%d, want %d/%d", tc.kt, num, den, tc.num, tc.den)
		}
	}
	for _, tc := range []struct {
		kt    KVType
		elems int64
		want  int64
	}{
		{KVTypeQ8_0, 1, 34}, {KVTypeQ8_0, 32, 34}, {KVTypeQ8_0, 33, 68}, {KVTypeQ8_0, 1024, 1088},
		{KVTypeF16, 3, 6}, {KVTypeF32, 3, 12}, {KVTypeF16, 0, 0}, {KVTypeF16, -5, 0},
		{KVType(5), 10, 0}, {KVTypeF32, math.MaxInt64, 0},
	} {
		if got := tc.kt.RowBytes(tc.elems); got != tc.want {
			t.Errorf("%v.RowBytes(%d) = %d, want %d", tc.kt, tc.elems, got, tc.want)
		}
	}
}

func TestKVBytesPerTokenWorkedExamples(t *testing.T) {
	// 36 layers, 8 KV heads, head dim 128.
	f16 := KVBytesPerToken(36, 8, 128, KVTypeF16)
	if f16 != 144<<10 { // 147456
		t.Fatalf("f16 bytes/token = %d, want 147456 (144 KiB)", f16)
	}
	if b := BytesForTokens(200000, f16); b < 29e9 || b > 30e9 {
		t.Errorf("200k tokens = %d bytes, want within [29e9, 30e9]", b)
	}
	q8 := KVBytesPerToken(36, 8, 128, KVTypeQ8_0)
	if q8 < 72<<10 || q8 > 77<<10 {
		t.Errorf("q8_0 bytes/token = %d, want between 72 KiB and 77 KiB", q8)
	}
	if q8 != 78336 { // 76.5 KiB: 2·36·ceil(1024/32)·34
		t.Errorf("q8_0 bytes/token = %d, want 78336", q8)
	}
	if f32 := KVBytesPerToken(36, 8, 128, KVTypeF32); f32 != 2*f16 {
		t.Errorf("f32 bytes/token = %d, want %d", f32, 2*f16)
	}
	// stories260K: 5 layers, 4 KV heads, head dim 8.
	if got := KVBytesPerToken(5, 4, 8, KVTypeF16); got != 640 {
		t.Errorf("stories260K f16 bytes/token = %d, want 640", got)
	}
	// q8_0 rounds each layer's 32-element row to one block.
	if got := KVBytesPerToken(5, 4, 8, KVTypeQ8_0); got != 2*5*34 {
		t.Errorf("stories260K q8_0 bytes/token = %d, want %d", got, 2*5*34)
	}
}

func TestKVBytesPerTokenInvalid(t *testing.T) {
	for _, tc := range []struct{ l, h, d int }{{0, 8, 128}, {36, 0, 128}, {36, 8, 0}, {-1, 8, 128}, {math.MaxInt32, math.MaxInt32, math.MaxInt32}} {
		if got := KVBytesPerToken(tc.l, tc.h, tc.d, KVTypeF16); got != 0 {
			t.Errorf("KVBytesPerToken(%d, %d, %d) = %d, want 0", tc.l, tc.h, tc.d, got)
		}
	}
	if got := KVBytesPerToken(1, 1, 1, KVType(3)); got != 0 {
		t.Errorf("unknown type: got %d, want 0", got)
	}
}

func TestTokensBytesHelpers(t *testing.T) {
	if got := TokensForBytes(1279, 640); got != 1 {
		t.Errorf("TokensForBytes(1279, 640) = %d", got)
	}
	if got := TokensForBytes(-1, 640); got != 0 {
		t.Errorf("TokensForBytes(-1, 640) = %d", got)
	}
	if got := TokensForBytes(1000, 0); got != 0 {
		t.Errorf("TokensForBytes(1000, 0) = %d", got)
	}
	if got := BytesForTokens(3, 640); got != 1920 {
		t.Errorf("BytesForTokens(3, 640) = %d", got)
	}
	if got := BytesForTokens(0, 640); got != 0 {
		t.Errorf("BytesForTokens(0, 640) = %d", got)
	}
	if got := BytesForTokens(math.MaxInt64/2, 3); got != math.MaxInt64 {
		t.Errorf("BytesForTokens overflow = %d, want MaxInt64", got)
	}
}
