package coldstore

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// FormatVersion is the on-disk format of block and snapshot files. It is
// part of every block key, so blocks of another version never collide with
// this one's.
const FormatVersion = 1

// Compat is what a saved KV blob depends on; it is part of every key.
type Compat struct {
	ModelDigest    string // sha256 hex of the model file
	KVType         string // "f16", "q8_0", "f32"
	FlashAttention bool
	Unified        bool
	Settings       string // any further context settings, free text
}

// Key addresses one block: BlockKey of its compat settings and token
// hash chain.
type Key [32]byte

// String is the key as 64 lowercase hex digits.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// ParseKey parses 64 hex digits (either case); anything else is
// ErrInvalidArgument.
func ParseKey(s string) (Key, error) {
	var k Key
	if len(s) != 2*len(k) {
		return Key{}, fmt.Errorf("%w: key %q is not 64 hex digits", ErrInvalidArgument, s)
	}
	if _, err := hex.Decode(k[:], []byte(s)); err != nil {
		return Key{}, fmt.Errorf("%w: key %q: %w", ErrInvalidArgument, s, err)
	}
	return k, nil
}

// keyDomain separates block keys from any other sha256 use.
const keyDomain = "ctxd/coldstore/block"

// BlockKey is sha256 over a domain tag, FormatVersion, every Compat field
// (strings length-prefixed, so no two different inputs share an encoding)
// and the block's token hash chain. It is stable across runs and machines.
func BlockKey(c Compat, chain [32]byte) Key {
	h := sha256.New()
	var n [8]byte
	str := func(s string) {
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	flag := func(b bool) {
		if b {
			h.Write([]byte{1})
		} else {
			h.Write([]byte{0})
		}
	}
	str(keyDomain)
	binary.LittleEndian.PutUint64(n[:], FormatVersion)
	h.Write(n[:])
	str(c.ModelDigest)
	str(c.KVType)
	flag(c.FlashAttention)
	flag(c.Unified)
	str(c.Settings)
	h.Write(chain[:])
	var k Key
	h.Sum(k[:0])
	return k
}
