package coldstore

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
)

// f16Bits converts a float32 to IEEE 754 binary16 bits, rounding to
// nearest even (enough for generating test data).
func f16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b>>23)&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case exp >= 31:
		return sign | 0x7c00
	case exp <= 0:
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint(14 - exp)
		half := uint32(1) << (shift - 1)
		r := mant >> shift
		if mant&(2*half-1) > half || (mant&(2*half-1) == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++
	}
	return sign | uint16(r)
}

// kvLikeF16 returns n bytes (n/2 f16 values, plus a zero tail byte when n
// is odd) shaped like an attention KV cache: rows of `channels` values,
// each channel with its own scale (log-normal, a few outlier channels),
// values normally distributed around zero. Mantissas are essentially
// random; exponents sit in a narrow band per channel.
func kvLikeF16(n int, seed uint64) []byte {
	const channels = 256
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	scale := make([]float64, channels)
	for c := range scale {
		scale[c] = math.Exp(rng.NormFloat64()*0.7 - 0.5)
		if rng.IntN(32) == 0 {
			scale[c] *= 8
		}
	}
	out := make([]byte, n)
	for i := 0; i+1 < n; i += 2 {
		c := (i / 2) % channels
		v := float32(rng.NormFloat64() * scale[c])
		binary.LittleEndian.PutUint16(out[i:], f16Bits(v))
	}
	return out
}

// kvLikeF32 is kvLikeF16's shape in float32 (n bytes, tail zero-filled).
func kvLikeF32(n int, seed uint64) []byte {
	const channels = 256
	rng := rand.New(rand.NewPCG(seed, seed^0x51ed2701))
	scale := make([]float64, channels)
	for c := range scale {
		scale[c] = math.Exp(rng.NormFloat64()*0.7 - 0.5)
	}
	out := make([]byte, n)
	for i := 0; i+3 < n; i += 4 {
		c := (i / 4) % channels
		binary.LittleEndian.PutUint32(out[i:], math.Float32bits(float32(rng.NormFloat64()*scale[c])))
	}
	return out
}

// randomBytes is incompressible data for n bytes.
func randomBytes(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(out[i:], rng.Uint64())
	}
	for i := n &^ 7; i < n; i++ {
		out[i] = byte(rng.Uint32())
	}
	return out
}
