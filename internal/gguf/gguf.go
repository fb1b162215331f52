package gguf

import (
	"errors"
	"fmt"
	"math"
)

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// Version is the GGUF version this package writes; Read accepts 2 and 3
// (they differ from 1 in 64-bit counts).
const Version = 3

// DefaultAlignment applies when general.alignment is absent.
const DefaultAlignment = 32

// KeyAlignment is the metadata key that sets the alignment.
const KeyAlignment = "general.alignment"

// Caps on what Read accepts from a file.
const (
	MaxTensors   = 1 << 20
	MaxKV        = 1 << 20
	MaxStringLen = 1 << 26
	MaxArrayLen  = 1 << 28
	MaxDims      = 4
	maxNesting   = 8
)

var (
	// ErrNotGGUF reports a file that does not start with the GGUF magic.
	ErrNotGGUF = errors.New("gguf: not a GGUF file")
	// ErrVersion reports a GGUF version this package cannot read.
	ErrVersion = errors.New("gguf: unsupported version")
	// ErrFormat reports a malformed file: truncated, a count or length
	// over its cap, an unknown value type, a misaligned or overlapping
	// tensor, data past the end of the file.
	ErrFormat = errors.New("gguf: malformed file")
	// ErrInvalid reports a value, tensor description or alignment the
	// Writer cannot write, or tensor data of the wrong size.
	ErrInvalid = errors.New("gguf: invalid input")
)

// ValueType is the type tag of a metadata value.
type ValueType uint32

// The GGUF metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("ValueType(%d)", uint32(t))
}

// Array is an array metadata value. Items hold Go values of the type that
// Elem names (for Elem == TypeArray, each item is an Array).
type Array struct {
	Elem  ValueType
	Items []any
}

// Strings returns the items of a string array.
func (a Array) Strings() ([]string, bool) {
	if a.Elem != TypeString {
		return nil, false
	}
	out := make([]string, len(a.Items))
	for i, v := range a.Items {
		s, ok := v.(string)
		if !ok {
			return nil, false
		}
		out[i] = s
	}
	return out, true
}

// TypeOf returns the GGUF type of a Go metadata value, or false for a Go
// type GGUF cannot hold.
func TypeOf(v any) (ValueType, bool) {
	switch v.(type) {
	case uint8:
		return TypeUint8, true
	case int8:
		return TypeInt8, true
	case uint16:
		return TypeUint16, true
	case int16:
		return TypeInt16, true
	case uint32:
		return TypeUint32, true
	case int32:
		return TypeInt32, true
	case float32:
		return TypeFloat32, true
	case bool:
		return TypeBool, true
	case string:
		return TypeString, true
	case Array:
		return TypeArray, true
	case uint64:
		return TypeUint64, true
	case int64:
		return TypeInt64, true
	case float64:
		return TypeFloat64, true
	}
	return 0, false
}

// KV is one metadata entry.
type KV struct {
	Key   string
	Value any
}

// TensorType is a ggml tensor element type.
type TensorType uint32

// The ggml tensor types whose sizes this package knows.
const (
	TensorF32     TensorType = 0
	TensorF16     TensorType = 1
	TensorQ4_0    TensorType = 2
	TensorQ4_1    TensorType = 3
	TensorQ5_0    TensorType = 6
	TensorQ5_1    TensorType = 7
	TensorQ8_0    TensorType = 8
	TensorQ8_1    TensorType = 9
	TensorQ2_K    TensorType = 10
	TensorQ3_K    TensorType = 11
	TensorQ4_K    TensorType = 12
	TensorQ5_K    TensorType = 13
	TensorQ6_K    TensorType = 14
	TensorQ8_K    TensorType = 15
	TensorIQ2_XXS TensorType = 16
	TensorIQ2_XS  TensorType = 17
	TensorIQ3_XXS TensorType = 18
	TensorIQ1_S   TensorType = 19
	TensorIQ4_NL  TensorType = 20
	TensorIQ3_S   TensorType = 21
	TensorIQ2_S   TensorType = 22
	TensorIQ4_XS  TensorType = 23
	TensorI8      TensorType = 24
	TensorI16     TensorType = 25
	TensorI32     TensorType = 26
	TensorI64     TensorType = 27
	TensorF64     TensorType = 28
	TensorIQ1_M   TensorType = 29
	TensorBF16    TensorType = 30
	TensorTQ1_0   TensorType = 34
	TensorTQ2_0   TensorType = 35
	TensorMXFP4   TensorType = 39
)

// typeTraits is a type's name, elements per block and bytes per block.
type typeTraits struct {
	name  string
	block uint64
	bytes uint64
}

var tensorTypes = map[TensorType]typeTraits{
	TensorF32: {"f32", 1, 4}, TensorF16: {"f16", 1, 2}, TensorBF16: {"bf16", 1, 2}, TensorF64: {"f64", 1, 8},
	TensorI8: {"i8", 1, 1}, TensorI16: {"i16", 1, 2}, TensorI32: {"i32", 1, 4}, TensorI64: {"i64", 1, 8},
	TensorQ4_0: {"q4_0", 32, 18}, TensorQ4_1: {"q4_1", 32, 20}, TensorQ5_0: {"q5_0", 32, 22}, TensorQ5_1: {"q5_1", 32, 24},
	TensorQ8_0: {"q8_0", 32, 34}, TensorQ8_1: {"q8_1", 32, 36}, TensorIQ4_NL: {"iq4_nl", 32, 18}, TensorMXFP4: {"mxfp4", 32, 17},
	TensorQ2_K: {"q2_K", 256, 84}, TensorQ3_K: {"q3_K", 256, 110}, TensorQ4_K: {"q4_K", 256, 144}, TensorQ5_K: {"q5_K", 256, 176},
	TensorQ6_K: {"q6_K", 256, 210}, TensorQ8_K: {"q8_K", 256, 292},
	TensorIQ2_XXS: {"iq2_xxs", 256, 66}, TensorIQ2_XS: {"iq2_xs", 256, 74}, TensorIQ3_XXS: {"iq3_xxs", 256, 98},
	TensorIQ1_S: {"iq1_s", 256, 50}, TensorIQ3_S: {"iq3_s", 256, 110}, TensorIQ2_S: {"iq2_s", 256, 82},
	TensorIQ4_XS: {"iq4_xs", 256, 136}, TensorIQ1_M: {"iq1_m", 256, 56}, TensorTQ1_0: {"tq1_0", 256, 54}, TensorTQ2_0: {"tq2_0", 256, 66},
}

func (t TensorType) String() string {
	if tr, ok := tensorTypes[t]; ok {
		return tr.name
	}
	return fmt.Sprintf("TensorType(%d)", uint32(t))
}

// TensorInfo describes one tensor. Dims are ggml's ne: Dims[0] is the
// innermost (contiguous) dimension.
type TensorInfo struct {
	Name string
	Dims []uint64
	Type TensorType
	// Offset is the tensor's start relative to the data section: set by
	// Read, and by NewWriter on its copy of the descriptions.
	Offset uint64
}

// Elements is the product of the dimensions.
func (t TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Size is the tensor's data size in bytes. It fails for a type whose block
// layout this package does not know, a first dimension that is not a whole
// number of blocks, or a size that overflows.
func (t TensorInfo) Size() (uint64, error) {
	tr, ok := tensorTypes[t.Type]
	if !ok {
		return 0, fmt.Errorf("tensor %q: unknown type %d", t.Name, uint32(t.Type))
	}
	if len(t.Dims) == 0 || len(t.Dims) > MaxDims {
		return 0, fmt.Errorf("tensor %q: %d dimensions (1..%d)", t.Name, len(t.Dims), MaxDims)
	}
	if t.Dims[0]%tr.block != 0 {
		return 0, fmt.Errorf("tensor %q: first dimension %d is not a multiple of %s's block of %d", t.Name, t.Dims[0], tr.name, tr.block)
	}
	n := uint64(1)
	for _, d := range t.Dims {
		if d == 0 {
			return 0, fmt.Errorf("tensor %q: zero dimension in %v", t.Name, t.Dims)
		}
		if n > math.MaxUint64/d {
			return 0, fmt.Errorf("tensor %q: dimensions %v overflow", t.Name, t.Dims)
		}
		n *= d
	}
	blocks := n / tr.block
	if blocks > math.MaxInt64/tr.bytes {
		return 0, fmt.Errorf("tensor %q: size overflows", t.Name)
	}
	return blocks * tr.bytes, nil
}

// File is a parsed GGUF header: everything but the tensor data.
type File struct {
	Version   uint32
	KV        []KV
	Tensors   []TensorInfo
	Alignment uint64
	// DataOffset is where the data section starts in the file.
	DataOffset int64
}

// Get returns the value of key.
func (f *File) Get(key string) (any, bool) {
	for _, kv := range f.KV {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// String returns a string value.
func (f *File) String(key string) (string, bool) {
	v, ok := f.Get(key)
	s, isStr := v.(string)
	return s, ok && isStr
}

// Uint returns an unsigned or non-negative signed integer value.
func (f *File) Uint(key string) (uint64, bool) {
	v, ok := f.Get(key)
	if !ok {
		return 0, false
	}
	switch x := v.(type) {
	case uint8:
		return uint64(x), true
	case uint16:
		return uint64(x), true
	case uint32:
		return uint64(x), true
	case uint64:
		return x, true
	case int8:
		return uint64(x), x >= 0
	case int16:
		return uint64(x), x >= 0
	case int32:
		return uint64(x), x >= 0
	case int64:
		return uint64(x), x >= 0
	}
	return 0, false
}

// Tensor returns the description of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	for _, t := range f.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return TensorInfo{}, false
}

// alignmentOf reads general.alignment from kvs: DefaultAlignment when
// absent, an error when it is not a power-of-two uint32.
func alignmentOf(kvs []KV) (uint64, error) {
	for _, kv := range kvs {
		if kv.Key != KeyAlignment {
			continue
		}
		a, ok := kv.Value.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 {
			return 0, fmt.Errorf("%s = %v (%T): want a power-of-two uint32", KeyAlignment, kv.Value, kv.Value)
		}
		return uint64(a), nil
	}
	return DefaultAlignment, nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// F16 converts f to IEEE 754 half precision bits, rounding to nearest
// even; values beyond the half range become ±Inf, NaN stays NaN.
func F16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp == 0 && mant == 0:
		return sign
	}
	e := exp - 127 + 15 // half exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal half (or zero): shift the full mantissa (with its
		// implicit one) right, rounding to nearest even.
		if e < -10 {
			return sign
		}
		m := mant | 0x800000
		shift := uint32(14 - e) // 13 for the mantissa width difference, 1-e for the exponent
		half := uint32(1) << (shift - 1)
		r := m >> shift
		rest := m & (1<<shift - 1)
		if rest > half || (rest == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rest := mant & 0x1fff
	if rest > 0x1000 || (rest == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, up to Inf: still correct
	}
	return sign | uint16(r)
}

// F32FromF16 converts half precision bits to float32 exactly.
func F32FromF16(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		f := float32(mant) / (1 << 24)
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}
