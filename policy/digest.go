package policy

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"io"
)

// Domain tags that start each canonical encoding, so that digests of
// different things never collide. Changing an encoding means a new tag.
const (
	manifestDomain = "ctxd/policy/manifest/v1"
	segmentDomain  = "ctxd/policy/segment/v1"
	compatDomain   = "ctxd/policy/compat/v1"
)

// encoder writes a canonical, length-prefixed encoding: strings as a
// big-endian uint64 length followed by their bytes, integers as big-endian
// uint64, booleans as one byte.
type encoder struct {
	h   hash.Hash
	buf [8]byte
}

func newEncoder(domain string) *encoder {
	e := &encoder{h: sha256.New()}
	e.str(domain)
	return e
}

func (e *encoder) uint(v uint64) {
	binary.BigEndian.PutUint64(e.buf[:], v)
	e.h.Write(e.buf[:])
}

func (e *encoder) int(v int64) { e.uint(uint64(v)) }

func (e *encoder) str(s string) {
	e.uint(uint64(len(s)))
	io.WriteString(e.h, s)
}

func (e *encoder) bool(b bool) {
	if b {
		e.buf[0] = 1
	} else {
		e.buf[0] = 0
	}
	e.h.Write(e.buf[:1])
}

func (e *encoder) segment(s *Segment) {
	e.str(s.ID)
	e.int(int64(s.Kind))
	e.int(int64(s.Class))
	e.bool(s.InvalidateOnEdit)
	e.bool(s.InvalidateOnTurn)
	e.uint(uint64(len(s.Paths)))
	for _, p := range s.Paths {
		e.str(p)
	}
	e.str(s.Text)
	e.bool(s.Stable)
	if len(s.Tokens) > 0 {
		// Appended only when present, so digests of text segments are
		// unchanged; the tag is no possible length prefix.
		e.uint(^uint64(0))
		e.uint(uint64(len(s.Tokens)))
		for _, t := range s.Tokens {
			e.uint(uint64(uint32(t)))
		}
	}
	if len(s.Control) > 0 {
		// Appended only when present, like tokens, under a tag of its
		// own: the same text tokenized with control tokens is another
		// segment.
		e.uint(^uint64(1))
		e.uint(uint64(len(s.Control)))
		for _, c := range s.Control {
			e.uint(uint64(c.Start))
			e.uint(uint64(c.End))
		}
	}
}

func (e *encoder) sum() (d [32]byte) {
	e.h.Sum(d[:0])
	return d
}

// Digest returns the SHA-256 of a canonical, length-prefixed encoding of
// every field of s, in field order. Class is hashed as given, not as
// EffectiveClass; nil and empty Paths hash alike.
func (s Segment) Digest() [32]byte {
	e := newEncoder(segmentDomain)
	e.segment(&s)
	return e.sum()
}

// Digest returns the SHA-256 of a canonical, length-prefixed encoding of the
// template and then every segment's fields, in order. Equal manifests have
// equal digests; changing, adding, removing or reordering anything changes
// it. A nil manifest digests like an empty one.
func (m *Manifest) Digest() [32]byte {
	e := newEncoder(manifestDomain)
	if m == nil {
		m = &Manifest{}
	}
	e.str(m.Template)
	e.uint(uint64(len(m.Segments)))
	for i := range m.Segments {
		e.segment(&m.Segments[i])
	}
	return e.sum()
}

// StablePrefixDigest returns the Digest of a manifest holding only m's
// template and stable prefix: two manifests with equal StablePrefixDigest
// (and equal CompatKey) can share the prefix's KV.
func (m *Manifest) StablePrefixDigest() [32]byte {
	if m == nil {
		return (&Manifest{}).Digest()
	}
	return (&Manifest{Template: m.Template, Segments: m.StablePrefix()}).Digest()
}

// CompatKey gates KV reuse: two prompts may share KV only if their keys are
// equal (compare with ==). Every field changes the KV a prompt produces.
type CompatKey struct {
	ModelDigest    string // sha256 of the model file, hex
	Template       string // prompt template name
	KVType         KVType
	FlashAttention bool
	ContextTokens  int64
	FormatVersion  int // version of ctxd's KV state format
	// Backend names the GPU backend and layer split that computed the KV
	// ("" on the CPU: such keys equal those made before the field existed).
	Backend string
}

// Digest returns the SHA-256 of a canonical, length-prefixed encoding of all
// of k's fields. KVType is encoded by name.
func (k CompatKey) Digest() [32]byte {
	e := newEncoder(compatDomain)
	e.str(k.ModelDigest)
	e.str(k.Template)
	e.str(k.KVType.String())
	e.bool(k.FlashAttention)
	e.int(k.ContextTokens)
	e.int(int64(k.FormatVersion))
	if k.Backend != "" {
		e.str(k.Backend)
	}
	return e.sum()
}

// String returns a short, stable label for k: the first 16 hex digits of
// k.Digest. Equal keys give equal strings; use == on keys to decide reuse.
func (k CompatKey) String() string {
	d := k.Digest()
	return hex.EncodeToString(d[:8])
}
