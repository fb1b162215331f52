package coldstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"syscall"
	"time"
)

// File framing, shared by block and snapshot files (little-endian):
//
//	0   magic [8]        "CTXDCOLB" (block) or "CTXDCOLS" (snapshot)
//	8   version u32      FormatVersion
//	12  headerLen u32    length H of the variable header that follows
//	16  payloadLen u64   length P of the payload after the header
//	24  payloadCRC u32   CRC32C of the payload
//	28  prefixCRC u32    CRC32C of bytes 0..28 and the H header bytes
//	32  header [H]
//	32+H payload [P]
//
// The file is exactly 32+H+P bytes. The prefix CRC covers the payload CRC,
// so together the two checksum the whole file; the header alone can be
// checked without reading the payload (Open does that).
const (
	blockMagic   = "CTXDCOLB"
	snapMagic    = "CTXDCOLS"
	prefixLen    = 32
	maxHeaderLen = 64 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Problem kinds.
const (
	KindTruncated    = "truncated"     // shorter than its framing says
	KindSize         = "size"          // longer than its framing says
	KindChecksum     = "checksum"      // a CRC32C does not match
	KindVersion      = "version"       // another FormatVersion
	KindForeign      = "foreign"       // not a coldstore file (magic), or an unknown name
	KindMalformed    = "malformed"     // checksums match but the content does not parse
	KindMisnamed     = "misnamed"      // the file's key or name differs from its file name
	KindMissingBlock = "missing-block" // a snapshot names a block that is not stored
	KindMissing      = "missing"       // an indexed file vanished
	KindIO           = "io"            // reading failed (EIO, permissions, ...)
)

// Problem is one file that failed a check. Err wraps ErrCorrupt,
// ErrVersion or ErrMissingBlock (or the I/O error), so errors.Is works.
type Problem struct {
	Path    string // where the file was
	Kind    string // one of the Kind* constants
	Err     error
	MovedTo string // its path under quarantine/, "" when it was not moved
}

func (p Problem) String() string {
	s := fmt.Sprintf("%s: %s: %v", p.Path, p.Kind, p.Err)
	if p.MovedTo != "" {
		s += " (moved to " + p.MovedTo + ")"
	}
	return s
}

// fileError is a check failure before it becomes a Problem.
type fileError struct {
	kind string
	err  error
}

func (e *fileError) Error() string { return e.kind + ": " + e.err.Error() }
func (e *fileError) Unwrap() error { return e.err }

func corruptf(kind, format string, args ...any) *fileError {
	return &fileError{kind: kind, err: fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)}
}

// frame is a parsed file: its header bytes and, when read, its payload.
type frame struct {
	header     []byte
	payload    []byte // nil unless requested
	payloadLen int64
	size       int64 // file size
}

// encodePrefix returns the 32-byte prefix followed by header, for a file
// whose payload is payload.
func encodePrefix(magic string, header, payload []byte) []byte {
	b := make([]byte, prefixLen, prefixLen+len(header))
	copy(b, magic)
	binary.LittleEndian.PutUint32(b[8:], FormatVersion)
	binary.LittleEndian.PutUint32(b[12:], uint32(len(header)))
	binary.LittleEndian.PutUint64(b[16:], uint64(len(payload)))
	binary.LittleEndian.PutUint32(b[24:], crc(payload))
	b = append(b, header...)
	c := crc32.Update(crc(b[:28]), castagnoli, header)
	binary.LittleEndian.PutUint32(b[28:], c)
	return b
}

// readFrame reads and checks the framing of f (size bytes long): magic,
// version, lengths and prefix CRC, and with withPayload also reads the
// payload (into buf when it is large enough) and checks its CRC.
// Failures are *fileError.
func readFrame(f *os.File, size int64, magic string, withPayload bool, buf []byte) (frame, error) {
	var pre [prefixLen]byte
	n, err := f.ReadAt(pre[:min(size, prefixLen)], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return frame{}, &fileError{kind: KindIO, err: err}
	}
	if n < len(magic) {
		if string(pre[:n]) == magic[:n] {
			return frame{}, corruptf(KindTruncated, "%d bytes, shorter than the %d-byte prefix", size, prefixLen)
		}
		return frame{}, &fileError{kind: KindForeign, err: fmt.Errorf("%w: not a coldstore file (%d bytes)", ErrCorrupt, size)}
	}
	if string(pre[:8]) != magic {
		return frame{}, &fileError{kind: KindForeign, err: fmt.Errorf("%w: magic %q, want %q", ErrCorrupt, pre[:8], magic)}
	}
	if n < prefixLen {
		return frame{}, corruptf(KindTruncated, "%d bytes, shorter than the %d-byte prefix", size, prefixLen)
	}
	if v := binary.LittleEndian.Uint32(pre[8:]); v != FormatVersion {
		return frame{}, &fileError{kind: KindVersion, err: fmt.Errorf("%w: file version %d, this build reads %d", ErrVersion, v, FormatVersion)}
	}
	hl := int64(binary.LittleEndian.Uint32(pre[12:]))
	pl64 := binary.LittleEndian.Uint64(pre[16:])
	if hl > maxHeaderLen || pl64 > math.MaxInt64/2 {
		return frame{}, corruptf(KindChecksum, "implausible lengths (header %d, payload %d)", hl, pl64)
	}
	pl := int64(pl64)
	if prefixLen+hl > size {
		return frame{}, corruptf(KindTruncated, "%d bytes, header needs %d", size, prefixLen+hl)
	}
	header := make([]byte, hl)
	if _, err := f.ReadAt(header, prefixLen); err != nil {
		return frame{}, &fileError{kind: KindIO, err: err}
	}
	if c := crc32.Update(crc(pre[:28]), castagnoli, header); c != binary.LittleEndian.Uint32(pre[28:]) {
		return frame{}, corruptf(KindChecksum, "header CRC32C %08x, stored %08x", c, binary.LittleEndian.Uint32(pre[28:]))
	}
	want := prefixLen + hl + pl
	switch {
	case size < want:
		return frame{}, corruptf(KindTruncated, "%d bytes, framing says %d", size, want)
	case size > want:
		return frame{}, corruptf(KindSize, "%d bytes, framing says %d", size, want)
	}
	fr := frame{header: header, payloadLen: pl, size: size}
	if withPayload {
		payload := buf
		if int64(cap(payload)) < pl {
			payload = make([]byte, pl)
		}
		payload = payload[:pl]
		if _, err := f.ReadAt(payload, prefixLen+hl); err != nil {
			return frame{}, &fileError{kind: KindIO, err: err}
		}
		if c := crc(payload); c != binary.LittleEndian.Uint32(pre[24:]) {
			return frame{}, corruptf(KindChecksum, "payload CRC32C %08x, stored %08x", c, binary.LittleEndian.Uint32(pre[24:]))
		}
		fr.payload = payload
	}
	return fr, nil
}

// readFrameFile opens path and reads its frame (see readFrame).
func readFrameFile(path, magic string, withPayload bool, buf []byte) (frame, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return frame{}, &fileError{kind: KindMissing, err: fmt.Errorf("%w: %w", ErrNotFound, err)}
		}
		return frame{}, &fileError{kind: KindIO, err: err}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return frame{}, &fileError{kind: KindIO, err: err}
	}
	return readFrame(f, st.Size(), magic, withPayload, buf)
}

// enc appends little-endian fields.
type enc struct{ b []byte }

func (e *enc) u8(v uint8)     { e.b = append(e.b, v) }
func (e *enc) u32(v uint32)   { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64)   { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) raw(p []byte)   { e.b = append(e.b, p...) }
func (e *enc) str(s string)   { e.u32(uint32(len(s))); e.b = append(e.b, s...) }
func (e *enc) bytes(p []byte) { e.u32(uint32(len(p))); e.b = append(e.b, p...) }

// dec reads what enc wrote; the first short read sets err and every later
// read returns zero values.
type dec struct {
	b   []byte
	err error
}

func (d *dec) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.err = fmt.Errorf("header field of %d bytes overruns the %d left", n, len(d.b))
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *dec) u8() uint8 {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (d *dec) u32() uint32 {
	if p := d.take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (d *dec) u64() uint64 {
	if p := d.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

func (d *dec) str() string   { return string(d.take(int(d.u32()))) }
func (d *dec) bytes() []byte { return d.take(int(d.u32())) }

// done reports a parse error, or bytes left over.
func (d *dec) done() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d unexpected trailing header bytes", len(d.b))
	}
	return d.err
}

// Block header (the variable part of a block file):
//
//	key [32], chain [32], rawLen u64, pos0 u64 (int64),
//	elemBytes u8, class u8, codec u8, reserved u8,
//	chunkRaw u32, tokens u32, table entries u32,
//	segment (u32 length + bytes), tokens [tokens]int32,
//	table [entries]u32 (stored length | rawChunkFlag)
//
// The payload is the codec's output (see codec.compress).
const codecZstdPlanes = 1

// Limits on block metadata, checked on Put and on read.
const (
	maxTokens     = 1 << 24
	maxSegmentLen = 64 << 10
	maxRawLen     = 1 << 34
)

type blockHeader struct {
	key      Key
	meta     BlockMeta
	rawLen   int64
	chunkRaw int
	table    []uint32
}

func encodeBlockHeader(h blockHeader) []byte {
	e := enc{b: make([]byte, 0, 128+len(h.meta.Segment)+4*len(h.meta.Tokens)+4*len(h.table))}
	e.raw(h.key[:])
	e.raw(h.meta.Chain[:])
	e.u64(uint64(h.rawLen))
	e.u64(uint64(int64(h.meta.Pos0)))
	e.u8(uint8(h.meta.ElemBytes))
	e.u8(h.meta.Class)
	e.u8(codecZstdPlanes)
	e.u8(0)
	e.u32(uint32(h.chunkRaw))
	e.u32(uint32(len(h.meta.Tokens)))
	e.u32(uint32(len(h.table)))
	e.str(h.meta.Segment)
	for _, t := range h.meta.Tokens {
		e.u32(uint32(t))
	}
	for _, t := range h.table {
		e.u32(t)
	}
	return e.b
}

// decodeBlockHeader parses and sanity-checks a block header against the
// payload length. Failures are *fileError (malformed).
func decodeBlockHeader(b []byte, payloadLen int64) (blockHeader, error) {
	d := dec{b: b}
	var h blockHeader
	copy(h.key[:], d.take(32))
	copy(h.meta.Chain[:], d.take(32))
	raw := d.u64()
	pos0 := int64(d.u64())
	h.meta.ElemBytes = int(d.u8())
	h.meta.Class = d.u8()
	codecID := d.u8()
	d.u8()
	h.chunkRaw = int(d.u32())
	nTok := d.u32()
	nTab := d.u32()
	h.meta.Segment = d.str()
	if d.err == nil && (nTok > maxTokens || uint64(nTok)*4 > uint64(len(d.b))) {
		d.err = fmt.Errorf("%d tokens do not fit the header", nTok)
	}
	if d.err == nil {
		h.meta.Tokens = make([]int32, nTok)
		for i := range h.meta.Tokens {
			h.meta.Tokens[i] = int32(d.u32())
		}
	}
	if d.err == nil && uint64(nTab)*4 > uint64(len(d.b)) {
		d.err = fmt.Errorf("%d table entries do not fit the header", nTab)
	}
	if d.err == nil {
		h.table = make([]uint32, nTab)
		for i := range h.table {
			h.table[i] = d.u32()
		}
	}
	if err := d.done(); err != nil {
		return blockHeader{}, corruptf(KindMalformed, "block header: %v", err)
	}
	switch {
	case codecID != codecZstdPlanes:
		return blockHeader{}, corruptf(KindMalformed, "unknown codec %d", codecID)
	case checkElemBytes(h.meta.ElemBytes) != nil:
		return blockHeader{}, corruptf(KindMalformed, "element size %d", h.meta.ElemBytes)
	case raw > maxRawLen:
		return blockHeader{}, corruptf(KindMalformed, "raw length %d", raw)
	case pos0 < 0 || pos0 > math.MaxInt32:
		return blockHeader{}, corruptf(KindMalformed, "position %d", pos0)
	case h.chunkRaw <= 0 || h.chunkRaw > maxChunkRaw || h.chunkRaw%h.meta.ElemBytes != 0:
		return blockHeader{}, corruptf(KindMalformed, "chunk size %d", h.chunkRaw)
	case len(h.meta.Segment) > maxSegmentLen:
		return blockHeader{}, corruptf(KindMalformed, "segment id of %d bytes", len(h.meta.Segment))
	}
	h.rawLen = int64(raw)
	h.meta.Pos0 = int(pos0)
	if want := chunkCount(h.rawLen, h.chunkRaw) * h.meta.ElemBytes; len(h.table) != want {
		return blockHeader{}, corruptf(KindMalformed, "%d table entries, want %d", len(h.table), want)
	}
	sum := h.rawLen % int64(h.meta.ElemBytes)
	for _, t := range h.table {
		sum += int64(t &^ rawChunkFlag)
	}
	if sum != payloadLen {
		return blockHeader{}, corruptf(KindMalformed, "table covers %d payload bytes, file has %d", sum, payloadLen)
	}
	return h, nil
}

// Snapshot header: created u64 (unix ns), name, compat (model digest, KV
// type, flags u8: 1 flash attention, 2 unified; settings), manifest
// length u64, meta length u64, blocks u32, then blocks × (key [32],
// tokens u32). The payload is manifest followed by meta.
func encodeSnapshot(s Snapshot) (header, payload []byte) {
	e := enc{b: make([]byte, 0, 128+len(s.Name)+len(s.Compat.ModelDigest)+len(s.Compat.Settings)+36*len(s.Blocks))}
	e.u64(uint64(s.Created.UnixNano()))
	e.str(s.Name)
	e.str(s.Compat.ModelDigest)
	e.str(s.Compat.KVType)
	var flags uint8
	if s.Compat.FlashAttention {
		flags |= 1
	}
	if s.Compat.Unified {
		flags |= 2
	}
	e.u8(flags)
	e.str(s.Compat.Settings)
	e.u64(uint64(len(s.Manifest)))
	e.u64(uint64(len(s.Meta)))
	e.u32(uint32(len(s.Blocks)))
	for _, b := range s.Blocks {
		e.raw(b.Key[:])
		e.u32(uint32(b.Tokens))
	}
	payload = make([]byte, 0, len(s.Manifest)+len(s.Meta))
	payload = append(payload, s.Manifest...)
	payload = append(payload, s.Meta...)
	return e.b, payload
}

// decodeSnapshotHeader parses a snapshot header; manifest and meta are
// filled from payload when it is not nil.
func decodeSnapshotHeader(b []byte, payloadLen int64, payload []byte) (Snapshot, error) {
	d := dec{b: b}
	var s Snapshot
	s.Created = time.Unix(0, int64(d.u64())).UTC()
	s.Name = d.str()
	s.Compat.ModelDigest = d.str()
	s.Compat.KVType = d.str()
	flags := d.u8()
	s.Compat.FlashAttention = flags&1 != 0
	s.Compat.Unified = flags&2 != 0
	s.Compat.Settings = d.str()
	ml := d.u64()
	mt := d.u64()
	nb := d.u32()
	if d.err == nil && uint64(nb)*36 > uint64(len(d.b)) {
		d.err = fmt.Errorf("%d blocks do not fit the header", nb)
	}
	if d.err == nil {
		s.Blocks = make([]SnapshotBlock, nb)
		for i := range s.Blocks {
			copy(s.Blocks[i].Key[:], d.take(32))
			s.Blocks[i].Tokens = int(d.u32())
		}
	}
	if err := d.done(); err != nil {
		return Snapshot{}, corruptf(KindMalformed, "snapshot header: %v", err)
	}
	if flags&^3 != 0 {
		return Snapshot{}, corruptf(KindMalformed, "unknown compat flags %#x", flags)
	}
	if ml > uint64(payloadLen) || mt != uint64(payloadLen)-ml {
		return Snapshot{}, corruptf(KindMalformed, "manifest %d + meta %d bytes, payload %d", ml, mt, payloadLen)
	}
	if payload != nil {
		s.Manifest = payload[:ml:ml]
		s.Meta = payload[ml:]
	}
	return s, nil
}
