package shm

import (
	"crypto/sha256"
	"encoding/binary"
	"hash/crc32"
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// FormatVersion is the on-disk format this package reads and writes. An
// arena written under another version is foreign (ErrForeign): set aside,
// never upgraded in place.
const FormatVersion = 1

// MaxSegIDLen is the longest segment id a block may carry, in bytes.
const MaxSegIDLen = 64

// Hash is a block's chain hash: SHA-256 over the previous block's chain
// hash and the block's tokens (see ChainHash). The first block of a tape
// chains from the zero Hash.
type Hash [32]byte

var le = binary.LittleEndian

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const chainDomain = "ctxd/shm chain v1\x00"

// ChainHash returns H(prev, tokens) = SHA-256(domain ‖ prev ‖ tokens as
// little-endian int32). A block's chain hash therefore commits to every
// token before it as well as its own, so two blocks with equal chain
// hashes hold the same tokens at the same positions of the same token
// prefix. SHA-256 (full 256 bits) rather than a 64-bit hash such as FNV-1a
// because a false match would splice foreign KV into a session: the inputs
// are repository text an agent reads, which a 64-bit non-cryptographic
// hash lets anyone collide on purpose. The cost (≈1 µs per 256 tokens with
// SHA-NI) is small next to the KV it guards. The zero Hash is the chain
// root.
func ChainHash(prev Hash, tokens []int32) Hash {
	h := sha256.New()
	h.Write([]byte(chainDomain))
	h.Write(prev[:])
	var buf [1024]byte
	for len(tokens) > 0 {
		n := min(len(tokens), len(buf)/4)
		for i, t := range tokens[:n] {
			le.PutUint32(buf[4*i:], uint32(t))
		}
		h.Write(buf[:4*n])
		tokens = tokens[n:]
	}
	var out Hash
	h.Sum(out[:0])
	return out
}

// File names inside the arena folder.
const (
	superName      = "arena.shm"
	regionPattern  = "region-%06d.shm"
	quarantineName = "quarantine"
	tmpSuffix      = ".tmp"
)

// headerBytes is the size of the superblock file and of the header at the
// start of every region file.
const headerBytes = 4096

// Superblock (file arena.shm, headerBytes long).
const (
	superMagic = "CTXDSHMA"

	sbMagic      = 0   // [8]byte
	sbVersion    = 8   // u32
	sbFlags      = 12  // u32, zero
	sbSlabBytes  = 16  // u64
	sbSPR        = 24  // u64 slabs per (full) region
	sbMetaBytes  = 32  // u64 offset of slab 0 in a region file
	sbArenaID    = 40  // [16]byte random, repeated in every region
	sbCreated    = 56  // i64 unix nanoseconds
	sbCompatHash = 64  // [32]byte SHA-256 of Options.Compat
	sbCompatLen  = 96  // u32 len(Options.Compat)
	sbCompatText = 104 // [256]byte first bytes of Options.Compat, diagnostics only
	sbCRC        = 504 // u32 CRC32C of bytes [0, sbCRC)
	sbGen        = 512 // u64 generation; outside the CRC, stored atomically
	compatTextN  = 256
)

// Region header (first headerBytes of region-NNNNNN.shm), followed by the
// entry table (slabsPerRegion × entryBytes), the next table
// (slabsPerRegion × 4) and, from metaBytes on, the slabs.
const (
	regionMagic = "CTXDSHMR"

	rhMagic     = 0  // [8]byte
	rhVersion   = 8  // u32
	rhIndex     = 12 // u32 region number, equal to the one in the file name
	rhArenaID   = 16 // [16]byte
	rhSlabBytes = 32 // u64
	rhSPR       = 40 // u64
	rhSlabs     = 48 // u64 slabs in this file (≤ SPR; the last region may be short)
	rhMetaBytes = 56 // u64
	rhCRC       = 64 // u32 CRC32C of bytes [0, rhCRC)
)

// Index entry: entry i of region r describes the block whose first slab is
// slab i of region r. gen is the commit word: zero means the slot is empty.
const (
	entryBytes = 64

	enID       = 0  // u64 block id
	enGen      = 8  // u64 generation of the Put; written last, atomically
	enFirst    = 16 // u32 global number of the first slab (= this slot)
	enSlabs    = 20 // u32 slabs in the chain
	enLength   = 24 // u64 stream length (block header + tokens + KV)
	enBlockCRC = 32 // u32 CRC32C of the stream
	enFlags    = 36 // u32, zero
	enCRC      = 60 // u32 CRC32C of bytes [0, enCRC), gen included
)

// endOfChain terminates a block's slab chain in the next table.
const endOfChain = ^uint32(0)

// BlockHeaderBytes and TokenBytes lay out a block's stream: the header,
// then each token as a little-endian int32, then the KV bytes. Callers
// sizing the arena (policy.SessionTokens) take them from here.
const (
	BlockHeaderBytes = blockHdr
	TokenBytes       = 4
)

// Block header at the start of every block's stream.
const (
	blockMagic = 0x4b4c4243 // "CBLK"
	blockHdr   = 160

	bhMagic   = 0   // u32
	bhHdrLen  = 4   // u32 = blockHdr
	bhID      = 8   // u64
	bhSession = 16  // u64
	bhChain   = 24  // [32]byte
	bhClass   = 56  // u8
	bhKind    = 57  // u8
	bhSegLen  = 58  // u8
	bhPos     = 60  // i32
	bhNTokens = 64  // u32
	bhKVLen   = 72  // u64
	bhSegID   = 80  // [64]byte
	bhEnd     = 144 // [144,160) reserved, zero
)

// metaBytesFor is the size of a region's header and tables, rounded up to
// the page size so that slabs are page aligned.
func metaBytesFor(spr, page int64) int64 {
	m := int64(headerBytes) + spr*(entryBytes+4)
	return (m + page - 1) / page * page
}

// geometryFor returns the slabs per region and the metadata size of a
// region file of at most regionBytes holding slabs of slabBytes.
func geometryFor(slabBytes, regionBytes, page int64) (spr, meta int64) {
	spr = (regionBytes - headerBytes) / (slabBytes + entryBytes + 4)
	for spr > 0 && metaBytesFor(spr, page)+spr*slabBytes > regionBytes {
		spr--
	}
	if spr > 1<<30 {
		spr = 1 << 30
	}
	return spr, metaBytesFor(spr, page)
}

func encodeBlockHeader(dst []byte, b *Block) {
	clear(dst[:blockHdr])
	le.PutUint32(dst[bhMagic:], blockMagic)
	le.PutUint32(dst[bhHdrLen:], blockHdr)
	le.PutUint64(dst[bhID:], b.ID)
	le.PutUint64(dst[bhSession:], b.Session)
	copy(dst[bhChain:bhChain+32], b.Chain[:])
	dst[bhClass] = b.Class
	dst[bhKind] = b.Kind
	dst[bhSegLen] = uint8(len(b.SegID))
	le.PutUint32(dst[bhPos:], uint32(b.Pos))
	le.PutUint32(dst[bhNTokens:], uint32(len(b.Tokens)))
	le.PutUint64(dst[bhKVLen:], uint64(len(b.KV)))
	copy(dst[bhSegID:bhSegID+MaxSegIDLen], b.SegID)
}

// decodeBlockHeader parses a block header; ok is false if it is malformed.
func decodeBlockHeader(src []byte) (m Meta, ok bool) {
	if len(src) < blockHdr || le.Uint32(src[bhMagic:]) != blockMagic || le.Uint32(src[bhHdrLen:]) != blockHdr {
		return m, false
	}
	segLen := int(src[bhSegLen])
	if segLen > MaxSegIDLen || src[59] != 0 || le.Uint32(src[68:]) != 0 || !allZero(src[bhEnd:blockHdr]) {
		return m, false
	}
	if !allZero(src[bhSegID+segLen : bhSegID+MaxSegIDLen]) {
		return m, false
	}
	m.ID = le.Uint64(src[bhID:])
	m.Session = le.Uint64(src[bhSession:])
	copy(m.Chain[:], src[bhChain:bhChain+32])
	m.Class = src[bhClass]
	m.Kind = src[bhKind]
	m.SegID = string(src[bhSegID : bhSegID+segLen])
	m.Pos = int32(le.Uint32(src[bhPos:]))
	m.NTokens = int(le.Uint32(src[bhNTokens:]))
	kv := le.Uint64(src[bhKVLen:])
	if kv > 1<<48 {
		return m, false
	}
	m.KVBytes = int64(kv)
	return m, true
}

func streamLength(ntokens int, kv int64) int64 {
	return blockHdr + TokenBytes*int64(ntokens) + kv
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if le.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// loadGen and storeGen access an 8-byte aligned generation word inside a
// mapping. The atomic store is what commits an index entry (and the
// superblock's generation): a process killed at any instant leaves either
// the old or the new value, and the plain stores before it (slab data,
// entry fields) are ordered before it.
func loadGen(b []byte) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&b[0])))
}

func storeGen(b []byte, v uint64) {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&b[0])), v)
}

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

func crcUpdate(c uint32, p []byte) uint32 { return crc32.Update(c, castagnoli, p) }

func trailingZeros(x uint64) int { return bits.TrailingZeros64(x) }
