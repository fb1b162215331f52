package tiers

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
)

// SSD-tier blobs. Every blob the daemon stores in the SSD tier is one or
// more engine blobs (parts: a spilled block, a dense block, an image
// range, or an extent of parked blocks) behind one envelope, the only
// record of how their bytes were laid out for compression:
//
//	"ctxdkvE2"            8-byte magic
//	u32 n                 number of parts
//	n × u32               each part's length, bit 31 set when the part is
//	                      the engine's BlobCodec.TokenMajor rewrite of its bytes
//	                      (a transposed V stored token by token, which
//	                      compresses better; the length is unchanged)
//	zero padding          to a multiple of 8 bytes (keeps f16 planes aligned)
//	the parts, in order
//
// DecodeBlob returns the engine's bytes of every part, concatenated, so
// a part's offset in the blob is its offset in the engine bytes.
// EncodeBlob runs the rewrite; callers run it after the engine token is
// released wherever they can (snapshots), so the token is held for memory
// copies only.

// envelope starts every SSD-tier blob; EnvelopeVersion is part of
// Compat's settings, so blobs of another layout never match a key.
const (
	envelope        = "ctxdkvE2"
	EnvelopeVersion = 2
	partRewritten   = 1 << 31
)

// EncodeBlob lays parts out for the SSD tier, rewriting each one
// token-major on its own (codec.TokenMajor) where that changes it.
func EncodeBlob(codec engine.BlobCodec, parts [][]byte) []byte {
	head := 8 + 4 + 4*len(parts)
	head = (head + 7) &^ 7
	n := head
	for _, p := range parts {
		n += len(p)
	}
	out := make([]byte, head, n)
	copy(out, envelope)
	binary.LittleEndian.PutUint32(out[8:], uint32(len(parts)))
	for i, p := range parts {
		tm, changed := codec.TokenMajor(p)
		entry := uint32(len(p))
		if changed {
			entry |= partRewritten
		}
		binary.LittleEndian.PutUint32(out[12+4*i:], entry)
		out = append(out, tm...)
	}
	return out
}

// DecodeBlob restores the engine's bytes of a blob read from the SSD
// tier (codec.FromTokenMajor for the parts that were rewritten).
func DecodeBlob(codec engine.BlobCodec, stored []byte) ([]byte, error) {
	bad := func(format string, args ...any) ([]byte, error) {
		return nil, fmt.Errorf("%w: SSD-tier blob: %s", protocol.ErrInternal, fmt.Sprintf(format, args...))
	}
	if len(stored) < 16 || string(stored[:8]) != envelope {
		return bad("no %s envelope in %d bytes", envelope, len(stored))
	}
	n := int(binary.LittleEndian.Uint32(stored[8:]))
	head := (8 + 4 + 4*n + 7) &^ 7
	if n <= 0 || head > len(stored) {
		return bad("%d parts do not fit %d bytes", n, len(stored))
	}
	body := stored[head:]
	out := make([]byte, 0, len(body))
	off := 0
	for i := 0; i < n; i++ {
		entry := binary.LittleEndian.Uint32(stored[12+4*i:])
		size := int(entry &^ partRewritten)
		if off+size > len(body) {
			return bad("part %d of %d bytes at %d outside a body of %d", i, size, off, len(body))
		}
		part := body[off : off+size]
		if entry&partRewritten != 0 {
			raw, err := codec.FromTokenMajor(part)
			if err != nil {
				return bad("part %d: %v", i, err)
			}
			part = raw
		}
		out = append(out, part...)
		off += size
	}
	if off != len(body) {
		return bad("%d bytes after the last part", len(body)-off)
	}
	return out, nil
}

// Compat is what a block saved for a model depends on (its digest, the KV
// settings, the daemon's format version and the backend's settings): the
// SSD tier's key prefix for that model.
func Compat(modelDigest string, kv policy.KVType, flashAttention bool, formatVersion int, backend string) coldstore.Compat {
	return coldstore.Compat{
		ModelDigest: modelDigest, KVType: kv.String(), FlashAttention: flashAttention, Unified: true,
		Settings: strings.TrimSpace(fmt.Sprintf("format=%d envelope=%d %s", formatVersion, EnvelopeVersion, backend)),
	}
}

// ContentKey addresses a blob by its token chain, the position its KV was
// extracted at and the engine bytes themselves (its parts, in order), so
// equal keys mean equal bytes and a restore is bit-exact whatever computed
// the block.
func ContentKey(c coldstore.Compat, chain [32]byte, pos0 int, parts ...[]byte) coldstore.Key {
	h := sha256.New()
	h.Write(chain[:])
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(pos0))
	h.Write(b[:])
	for _, p := range parts {
		h.Write(p)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return coldstore.BlockKey(c, sum)
}

// ElemBytes is the byte-plane stride for the KV type.
func ElemBytes(kv policy.KVType) int {
	if num, den := kv.BytesPerElement(); den == 1 && num > 0 {
		return int(num)
	}
	return 1 // quantized rows: no split
}

// WireErr maps coldstore errors onto protocol sentinels, keeping the
// cause.
func WireErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, coldstore.ErrNotFound):
		return fmt.Errorf("%w: %w", protocol.ErrNotFound, err)
	case errors.Is(err, coldstore.ErrInvalidName):
		return fmt.Errorf("%w: %w", protocol.ErrInvalidArgument, err)
	case errors.Is(err, coldstore.ErrUnavailable), errors.Is(err, coldstore.ErrQueueFull):
		return fmt.Errorf("%w: %w", protocol.ErrResourceExhausted, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", protocol.ErrCancelled, err)
	default:
		return fmt.Errorf("%w: %w", protocol.ErrInternal, err)
	}
}
