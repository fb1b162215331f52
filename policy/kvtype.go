package policy

import (
	"fmt"
	"math"
	"strings"
)

// KVType is the element type of the KV cache. The zero value is KVTypeF16.
type KVType int

const (
	// KVTypeF16 stores K and V as IEEE half floats: 2 bytes per element.
	KVTypeF16 KVType = iota
	// KVTypeQ8_0 stores K and V as ggml q8_0 blocks: 32 int8 quants and one
	// f16 scale, 34 bytes per 32 elements.
	KVTypeQ8_0
	// KVTypeF32 stores K and V as IEEE single floats: 4 bytes per element.
	KVTypeF32
)

// ggml block_q8_0 geometry.
const (
	q8_0BlockElements = 32
	q8_0BlockBytes    = 34
)

// String returns the canonical name: "f16", "q8_0" or "f32".
func (t KVType) String() string {
	switch t {
	case KVTypeF16:
		return "f16"
	case KVTypeQ8_0:
		return "q8_0"
	case KVTypeF32:
		return "f32"
	}
	return fmt.Sprintf("KVType(%d)", int(t))
}

// Valid reports whether t is one of the defined KV types.
func (t KVType) Valid() bool { return t >= KVTypeF16 && t <= KVTypeF32 }

// ParseKVType parses "f16", "q8_0" (or "q8") and "f32", ignoring case and
// surrounding space. Other names give an error wrapping ErrUnknownName.
func ParseKVType(s string) (KVType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "f16":
		return KVTypeF16, nil
	case "q8_0", "q8":
		return KVTypeQ8_0, nil
	case "f32":
		return KVTypeF32, nil
	}
	return 0, fmt.Errorf("%w: KV type %q (want f16, q8_0 or f32)", ErrUnknownName, s)
}

// BytesPerElement returns the storage cost of one element as the exact
// fraction num/den bytes: 2/1 for f16, 4/1 for f32 and 34/32 for q8_0 (one
// block of 32 elements takes 34 bytes). Storage is allocated in whole
// blocks of den elements. An invalid type gives 0/1.
func (t KVType) BytesPerElement() (num, den int64) {
	switch t {
	case KVTypeF16:
		return 2, 1
	case KVTypeQ8_0:
		return q8_0BlockBytes, q8_0BlockElements
	case KVTypeF32:
		return 4, 1
	}
	return 0, 1
}

// RowBytes returns the bytes needed to store elements elements of type t,
// rounding up to whole blocks. It returns 0 for a non-positive count, an
// invalid type, or a result that overflows int64.
func (t KVType) RowBytes(elements int64) int64 {
	num, den := t.BytesPerElement()
	if elements <= 0 || num == 0 {
		return 0
	}
	blocks := elements/den + boolInt64(elements%den != 0)
	b, ok := mulNonNeg(blocks, num)
	if !ok {
		return 0
	}
	return b
}

// KVBytesPerToken returns the KV cache bytes one token occupies:
// 2 (K and V) · layers · RowBytes(kvHeads·headDim). Each layer's K and V rows
// are rounded up to whole blocks separately. It returns 0 when any dimension
// is non-positive, t is invalid, or the result overflows int64.
func KVBytesPerToken(layers, kvHeads, headDim int, t KVType) int64 {
	if layers <= 0 || kvHeads <= 0 || headDim <= 0 || !t.Valid() {
		return 0
	}
	elems, ok := mulNonNeg(int64(kvHeads), int64(headDim))
	if !ok {
		return 0
	}
	row := t.RowBytes(elems)
	if row == 0 {
		return 0
	}
	perLayer, ok := mulNonNeg(2, row)
	if !ok {
		return 0
	}
	total, ok := mulNonNeg(perLayer, int64(layers))
	if !ok {
		return 0
	}
	return total
}

// TokensForBytes returns how many whole tokens of KV fit in bytes, or 0 when
// either argument is non-positive.
func TokensForBytes(bytes, kvBytesPerToken int64) int64 {
	if bytes <= 0 || kvBytesPerToken <= 0 {
		return 0
	}
	return bytes / kvBytesPerToken
}

// BytesForTokens returns the KV bytes tokens tokens occupy, 0 when either
// argument is non-positive, and math.MaxInt64 when the product overflows.
func BytesForTokens(tokens, kvBytesPerToken int64) int64 {
	if tokens <= 0 || kvBytesPerToken <= 0 {
		return 0
	}
	b, ok := mulNonNeg(tokens, kvBytesPerToken)
	if !ok {
		return math.MaxInt64
	}
	return b
}

// mulNonNeg multiplies two non-negative numbers, reporting overflow.
func mulNonNeg(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	if a > math.MaxInt64/b {
		return 0, false
	}
	return a * b, true
}

func boolInt64(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
