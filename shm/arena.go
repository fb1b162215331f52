package shm

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"unsafe"

	mmap "github.com/edsrzf/mmap-go"

	"github.com/ctxd/ctxd/internal/privdir"
)

// Errors. Test with errors.Is; the returned errors wrap these with detail.
var (
	// ErrArenaFull: the block does not fit in the free slabs plus the
	// regions the budget still allows. The caller evicts (Delete) and
	// retries.
	ErrArenaFull = errors.New("shm: arena full")
	// ErrTooLarge: the block needs more slabs than the whole budget holds;
	// evicting cannot help.
	ErrTooLarge = errors.New("shm: block larger than the arena budget")
	// ErrNotFound: no block with that id.
	ErrNotFound = errors.New("shm: block not found")
	// ErrCorrupt: stored bytes fail their checksum or structure.
	ErrCorrupt = errors.New("shm: corrupt")
	// ErrForeign: a file made by another format version, another arena or
	// under another compat key.
	ErrForeign = errors.New("shm: foreign arena")
	// ErrClosed: the Arena was closed.
	ErrClosed = errors.New("shm: arena closed")
	// ErrLocked: another Open (in this or another process) holds the arena.
	ErrLocked = errors.New("shm: arena locked by another user")
	// ErrUnsafeFolder: the arena folder is a symbolic link, not a folder,
	// or owned by another uid; it is left untouched.
	ErrUnsafeFolder = privdir.ErrUnsafe
)

// Options configure Open.
type Options struct {
	// SlabBytes is the slab size, a multiple of the page size. Zero means
	// 64 KiB. Fixed when the arena is created; reopening uses the stored
	// value (a difference is noted in the Report).
	SlabBytes int64
	// RegionBytes is the largest size of one region file. Zero means
	// 256 MiB. Fixed when the arena is created, like SlabBytes.
	RegionBytes int64
	// BudgetBytes bounds the bytes of all the arena's files together
	// (superblock and region files). Required; the caller derives it from
	// capacity. It may change between opens: a smaller budget stops growth
	// and removes empty regions, but never drops blocks. Files moved to
	// quarantine/ are not counted (on tmpfs they still hold RAM until
	// removed).
	BudgetBytes int64
	// Compat is an opaque key (model digest, KV type, settings) the KV
	// bytes depend on. An arena made under another key is set aside.
	Compat string
	// Sync adds msync(MS_SYNC) after the data and after the index entry of
	// every mutation, for durability across a machine crash on a
	// disk-backed folder. Without it a Put survives the death of the
	// process (the page cache holds it) but not of the machine.
	Sync bool
}

// Block is one token range of a session with its KV bytes.
type Block struct {
	ID      uint64
	Session uint64
	Chain   Hash   // ChainHash(previous block's Chain, Tokens)
	Class   uint8  // cache class
	Kind    uint8  // segment kind
	SegID   string // segment id, at most MaxSegIDLen bytes
	Pos     int32  // position the block was extracted at
	Tokens  []int32
	KV      []byte // opaque, as ExtractRange returned it
}

// Meta describes a stored block without its tokens and KV.
type Meta struct {
	ID      uint64
	Session uint64
	Chain   Hash
	Class   uint8
	Kind    uint8
	SegID   string
	Pos     int32
	NTokens int
	KVBytes int64
	Bytes   int64  // stored stream: block header + tokens + KV
	Slabs   int    // slabs the block occupies
	Gen     uint64 // generation of the Put that stored it
}

// Stats are the arena's usage figures.
type Stats struct {
	Blocks         int
	SlabBytes      int64
	Regions        int
	Slabs          int64 // slabs in the region files that exist now
	SlabsUsed      int64
	SlabsFree      int64 // free slabs in existing regions
	SlabsAvailable int64 // slabs Put may still use: CapacitySlabs − used (see CapacitySlabs)
	BytesUsed      int64 // SlabsUsed × SlabBytes
	BytesAvailable int64 // SlabsAvailable × SlabBytes
	PayloadBytes   int64 // sum of the stored streams (header + tokens + KV)
	KVBytes        int64
	FileBytes      int64 // superblock + region files
	BudgetBytes    int64
	// CapacitySlabs is what the budget holds: full regions and one short
	// one. Put fails with ErrArenaFull exactly when a block needs more
	// than CapacitySlabs − SlabsUsed, except after the budget grew between
	// opens while a short region made under the old budget still holds
	// blocks (it costs up to one region header of slabs; once empty it is
	// remade full).
	CapacitySlabs  int64
	Generation     uint64
	CorruptDropped int // blocks dropped by a failed read checksum since Open
}

// AddressRange is one mapped region file in this process's address space.
type AddressRange struct {
	Region    int
	Path      string
	Start     uintptr // first byte of the mapping
	End       uintptr // one past the last byte
	SlabStart uintptr // first byte of slab 0 (page aligned)
}

// Report tells what Open found.
type Report struct {
	Attached   bool // an existing arena was attached; false: a fresh one was made
	Blocks     int  // blocks served after Open
	Generation uint64
	Dropped    []DroppedBlock // index entries dropped (failed checks)
	SetAside   []SetAsideFile // files moved to quarantine/
	Notes      []string       // everything else worth logging
}

// DroppedBlock is an index entry Open dropped. Err wraps ErrCorrupt.
type DroppedBlock struct {
	ID   uint64 // as read; not trustworthy when the entry itself failed
	Path string // region file holding the entry
	Slot int    // entry slot in that file
	Err  error
}

func (d DroppedBlock) String() string {
	return fmt.Sprintf("block %d (%s slot %d): %v", d.ID, d.Path, d.Slot, d.Err)
}

// SetAsideFile is a file Open refused and moved to quarantine/. Err wraps
// ErrCorrupt or ErrForeign.
type SetAsideFile struct {
	Path    string
	MovedTo string // empty if it could not be moved (then it was removed)
	Err     error
}

func (s SetAsideFile) String() string {
	return fmt.Sprintf("%s -> %s: %v", s.Path, s.MovedTo, s.Err)
}

// Arena is an open block arena. It is safe for concurrent use.
type Arena struct {
	mu   sync.RWMutex
	dir  string
	opts Options
	page int64

	lockF  *os.File // the folder itself, flocked
	superF *os.File
	super  mmap.MMap

	slab, spr, meta int64 // geometry (from the superblock)
	arenaID         [16]byte
	compatHash      [32]byte

	regions []*region // by region number; nil where there is no file
	index   map[uint64]*rec
	byChain map[Hash][]uint64

	gen            uint64
	used           int64 // slabs in use
	nfree          int64 // free slabs in existing regions
	payload, kv    int64
	capSlabs       int64
	corruptDropped int
	closed         bool
	scratch        []byte
}

type region struct {
	idx   int
	path  string
	f     *os.File
	mm    mmap.MMap
	slabs int64
	free  []uint64 // bit i set: slab i is free
	nfree int64
}

type rec struct {
	Meta
	slabs []uint32 // global slab numbers, in stream order
	crc   uint32
}

// ---- geometry helpers ----

func (a *Arena) loc(g uint32) (*region, int64) {
	r := int64(g) / a.spr
	if r >= int64(len(a.regions)) {
		return nil, 0
	}
	reg := a.regions[r]
	i := int64(g) % a.spr
	if reg == nil || i >= reg.slabs {
		return nil, 0
	}
	return reg, i
}

func (a *Arena) global(r *region, i int64) uint32 { return uint32(int64(r.idx)*a.spr + i) }

func (a *Arena) slabAt(r *region, i int64) []byte {
	off := a.meta + i*a.slab
	return r.mm[off : off+a.slab : off+a.slab]
}

func (a *Arena) entryOff(i int64) int64 { return headerBytes + i*entryBytes }
func (a *Arena) nextOff(i int64) int64  { return headerBytes + a.spr*entryBytes + i*4 }

func (a *Arena) entryAt(r *region, i int64) []byte {
	off := a.entryOff(i)
	return r.mm[off : off+entryBytes : off+entryBytes]
}

func (a *Arena) nextAt(r *region, i int64) []byte {
	off := a.nextOff(i)
	return r.mm[off : off+4 : off+4]
}

func (a *Arena) regionFileBytes(slabs int64) int64 { return a.meta + slabs*a.slab }

func (a *Arena) fileBytes() int64 {
	n := int64(headerBytes)
	for _, r := range a.regions {
		if r != nil {
			n += int64(len(r.mm))
		}
	}
	return n
}

// capacityFor is the number of slabs a budget holds: full regions, then one
// short region with what is left.
func (a *Arena) capacityFor(budget int64) int64 {
	b := budget - headerBytes
	if b <= 0 {
		return 0
	}
	full := a.regionFileBytes(a.spr)
	n := b / full * a.spr
	if rem := b % full; rem > a.meta {
		n += min((rem-a.meta)/a.slab, a.spr)
	}
	return n
}

func (r *region) isFree(i int64) bool { return r.free[i/64]&(1<<(i%64)) != 0 }
func (r *region) setFree(i int64)     { r.free[i/64] |= 1 << (i % 64); r.nfree++ }
func (r *region) setUsed(i int64)     { r.free[i/64] &^= 1 << (i % 64); r.nfree-- }

// ---- public API ----

// Put stores b (copying Tokens and KV in), replacing any block with the
// same ID. It returns only after the block is committed: the slabs are
// written, then the index entry (with the block's checksum) is published,
// then the generation is bumped. A process killed at any point of Put
// leaves either the old state or the new, never a block that reads wrong.
// A replacing Put needs room for both copies until it commits. Errors:
// ErrArenaFull (evict and retry), ErrTooLarge, ErrClosed.
func (a *Arena) Put(b Block) error {
	if len(b.SegID) > MaxSegIDLen {
		return fmt.Errorf("shm: block %d: segment id is %d bytes, at most %d", b.ID, len(b.SegID), MaxSegIDLen)
	}
	if int64(len(b.Tokens)) > 1<<31 {
		return fmt.Errorf("shm: block %d: %d tokens", b.ID, len(b.Tokens))
	}
	length := streamLength(len(b.Tokens), int64(len(b.KV)))

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	need := (length + a.slab - 1) / a.slab
	if need > a.capSlabs {
		return fmt.Errorf("%w: block %d needs %d slabs (%d bytes), the budget of %d bytes holds %d",
			ErrTooLarge, b.ID, need, length, a.opts.BudgetBytes, a.capSlabs)
	}
	if a.used+need > a.capSlabs {
		return fmt.Errorf("%w: block %d needs %d slabs, %d of %d in use", ErrArenaFull, b.ID, need, a.used, a.capSlabs)
	}
	reshaped := false
	for a.nfree < need {
		if err := a.growLocked(); err != nil {
			if !reshaped {
				reshaped = true
				if a.reshapeLocked() {
					continue
				}
			}
			return fmt.Errorf("block %d needs %d slabs, %d free: %w", b.ID, need, a.nfree, err)
		}
	}
	slabs := a.allocLocked(need)

	// 1. Slabs: chain links, then the stream.
	for k, g := range slabs {
		r, i := a.loc(g)
		next := endOfChain
		if k+1 < len(slabs) {
			next = slabs[k+1]
		}
		le.PutUint32(a.nextAt(r, i), next)
	}
	w := streamWriter{a: a, slabs: slabs}
	hdr := a.scratchBuf()[:blockHdr]
	encodeBlockHeader(hdr, &b)
	w.write(hdr)
	w.writeTokens(b.Tokens, a.scratchBuf())
	w.write(b.KV)
	crashPoint("put:slabs-written")
	if a.opts.Sync {
		if err := a.syncSlabs(slabs); err != nil {
			a.freeSlabs(slabs)
			return fmt.Errorf("shm: msync: %w", err)
		}
	}

	// 2. Publish the index entry; its gen word, stored last and atomically,
	// commits it.
	newGen := a.gen + 1
	r0, i0 := a.loc(slabs[0])
	e := a.entryAt(r0, i0)
	le.PutUint64(e[enID:], b.ID)
	le.PutUint32(e[enFirst:], slabs[0])
	le.PutUint32(e[enSlabs:], uint32(len(slabs)))
	le.PutUint64(e[enLength:], uint64(length))
	le.PutUint32(e[enBlockCRC:], w.crc)
	le.PutUint32(e[enFlags:], 0)
	clear(e[40:enCRC])
	var tmp [entryBytes]byte
	copy(tmp[:], e)
	le.PutUint64(tmp[enGen:], newGen)
	le.PutUint32(e[enCRC:], crc(tmp[:enCRC]))
	crashPoint("put:entry-written")
	storeGen(e[enGen:], newGen)
	crashPoint("put:entry-committed")

	old := a.index[b.ID]
	if old != nil {
		a.clearEntry(old)
		crashPoint("put:old-cleared")
	}
	// 3. Bump the generation.
	a.setGen(newGen)
	crashPoint("put:gen-bumped")

	if old != nil {
		a.forget(old)
	}
	a.remember(&rec{
		Meta: Meta{ID: b.ID, Session: b.Session, Chain: b.Chain, Class: b.Class, Kind: b.Kind,
			SegID: strings.Clone(b.SegID), Pos: b.Pos, NTokens: len(b.Tokens), KVBytes: int64(len(b.KV)),
			Bytes: length, Slabs: len(slabs), Gen: newGen},
		slabs: slabs,
		crc:   w.crc,
	})
	if a.opts.Sync {
		// The block is stored either way; only its durability across a
		// machine crash is in doubt.
		if err := a.syncMeta(r0, i0, old); err != nil {
			return fmt.Errorf("shm: block %d stored, msync: %w", b.ID, err)
		}
	}
	return nil
}

// Delete removes a block and frees its slabs.
func (a *Arena) Delete(id uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	r := a.index[id]
	if r == nil {
		return fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	return a.deleteLocked(r)
}

// deleteLocked bumps the generation first, then clears the entry: a crash
// in between leaves the generation advanced over an unchanged index, never
// a changed index under an old generation (for Put, Open recovers the
// generation from the entry itself).
func (a *Arena) deleteLocked(r *rec) error {
	a.setGen(a.gen + 1)
	crashPoint("delete:gen-bumped")
	a.clearEntry(r)
	crashPoint("delete:entry-cleared")
	var err error
	if a.opts.Sync {
		err = a.syncMeta(nil, 0, r)
	}
	a.forget(r)
	a.trimLocked()
	a.reshapeLocked()
	if err != nil {
		return fmt.Errorf("shm: msync: %w", err)
	}
	return nil
}

// Has reports whether a block is stored.
func (a *Arena) Has(id uint64) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return !a.closed && a.index[id] != nil
}

// Lookup returns a block's metadata.
func (a *Arena) Lookup(id uint64) (Meta, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed || a.index[id] == nil {
		return Meta{}, false
	}
	return a.index[id].Meta, true
}

// List returns the metadata of every block, by ID.
func (a *Arena) List() []Meta {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return nil
	}
	out := make([]Meta, 0, len(a.index))
	for _, r := range a.index {
		out = append(out, r.Meta)
	}
	slices.SortFunc(out, func(x, y Meta) int {
		switch {
		case x.ID < y.ID:
			return -1
		case x.ID > y.ID:
			return 1
		}
		return 0
	})
	return out
}

// FindByChainHash returns a block whose chain hash is h; when several
// blocks (of different sessions) share it, the most recently stored one.
func (a *Arena) FindByChainHash(h Hash) (uint64, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return 0, false
	}
	var best *rec
	for _, id := range a.byChain[h] {
		if r := a.index[id]; best == nil || r.Gen > best.Gen {
			best = r
		}
	}
	if best == nil {
		return 0, false
	}
	return best.ID, true
}

// Get returns a copy of a block, verifying its checksum. A block whose
// checksum fails is dropped and ErrCorrupt returned.
func (a *Arena) Get(id uint64) (Block, error) {
	a.mu.RLock()
	if a.closed {
		a.mu.RUnlock()
		return Block{}, ErrClosed
	}
	r := a.index[id]
	if r == nil {
		a.mu.RUnlock()
		return Block{}, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	tok := make([]byte, 4*r.NTokens)
	b := Block{ID: r.ID, Session: r.Session, Chain: r.Chain, Class: r.Class, Kind: r.Kind,
		SegID: r.SegID, Pos: r.Pos, Tokens: make([]int32, r.NTokens), KV: make([]byte, r.KVBytes)}
	kvOff := blockHdr + int64(len(tok))
	ok := a.scan(r, func(off int64, seg []byte) {
		copyOverlap(tok, blockHdr, seg, off)
		copyOverlap(b.KV, kvOff, seg, off)
	})
	a.mu.RUnlock()
	if !ok {
		return Block{}, a.readFailed(r)
	}
	for i := range b.Tokens {
		b.Tokens[i] = int32(le.Uint32(tok[4*i:]))
	}
	return b, nil
}

// ReadKV appends a block's KV bytes to dst and returns the extended slice
// (pass buf[:0] to reuse a buffer without allocating). The checksum is
// verified in the same pass; on failure dst comes back unchanged, the block
// is dropped and ErrCorrupt returned.
func (a *Arena) ReadKV(id uint64, dst []byte) ([]byte, error) {
	a.mu.RLock()
	if a.closed {
		a.mu.RUnlock()
		return dst, ErrClosed
	}
	r := a.index[id]
	if r == nil {
		a.mu.RUnlock()
		return dst, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	n0 := len(dst)
	dst = slices.Grow(dst, int(r.KVBytes))
	out := dst[n0 : n0+int(r.KVBytes)]
	kvOff := blockHdr + 4*int64(r.NTokens)
	ok := a.scan(r, func(off int64, seg []byte) { copyOverlap(out, kvOff, seg, off) })
	a.mu.RUnlock()
	if !ok {
		return dst[:n0], a.readFailed(r)
	}
	return dst[:n0+int(r.KVBytes)], nil
}

// ViewKV verifies a block's checksum and calls fn with its KV bytes in
// place: the pieces, in order, are slices of the mapping (one per slab the
// KV touches; consecutive pieces may be adjacent in memory). They are valid
// only until fn returns and must not be modified; fn must not call the
// Arena's mutating methods (the read lock is held).
func (a *Arena) ViewKV(id uint64, fn func(kv [][]byte) error) error {
	a.mu.RLock()
	if a.closed {
		a.mu.RUnlock()
		return ErrClosed
	}
	r := a.index[id]
	if r == nil {
		a.mu.RUnlock()
		return fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	kvOff := blockHdr + 4*int64(r.NTokens)
	var parts [][]byte
	ok := a.scan(r, func(off int64, seg []byte) {
		if end := off + int64(len(seg)); end > kvOff {
			s := max(kvOff-off, 0)
			parts = append(parts, seg[s:len(seg):len(seg)])
		}
	})
	if !ok {
		a.mu.RUnlock()
		return a.readFailed(r)
	}
	defer a.mu.RUnlock()
	return fn(parts)
}

// Stats returns usage figures.
func (a *Arena) Stats() Stats {
	a.mu.RLock()
	defer a.mu.RUnlock()
	s := Stats{
		Blocks: len(a.index), SlabBytes: a.slab, SlabsUsed: a.used, SlabsFree: a.nfree,
		SlabsAvailable: max(a.capSlabs-a.used, 0),
		PayloadBytes:   a.payload, KVBytes: a.kv, FileBytes: a.fileBytes(), BudgetBytes: a.opts.BudgetBytes,
		CapacitySlabs: a.capSlabs, Generation: a.gen, CorruptDropped: a.corruptDropped,
	}
	for _, r := range a.regions {
		if r != nil {
			s.Regions++
			s.Slabs += r.slabs
		}
	}
	s.BytesUsed = s.SlabsUsed * a.slab
	s.BytesAvailable = s.SlabsAvailable * a.slab
	return s
}

// Ranges returns the address ranges of the mapped region files. They
// change when a region is added or removed (Put, Delete).
func (a *Arena) Ranges() []AddressRange {
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []AddressRange
	for _, r := range a.regions {
		if r == nil || len(r.mm) == 0 {
			continue
		}
		start := uintptr(unsafe.Pointer(&r.mm[0]))
		out = append(out, AddressRange{Region: r.idx, Path: r.path, Start: start,
			End: start + uintptr(len(r.mm)), SlabStart: start + uintptr(a.meta)})
	}
	return out
}

// Dir returns the arena folder.
func (a *Arena) Dir() string { return a.dir }

// Flush writes every mapped page back to the files and waits (msync).
func (a *Arena) Flush() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	return a.flushLocked()
}

func (a *Arena) flushLocked() error {
	var errs []error
	for _, r := range a.regions {
		if r != nil {
			errs = append(errs, r.mm.Flush())
		}
	}
	errs = append(errs, a.super.Flush())
	return errors.Join(errs...)
}

// Close unmaps the arena and releases its lock. The blocks stay in the
// files for the next Open. Closing twice is a no-op.
func (a *Arena) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	var errs []error
	if a.opts.Sync {
		errs = append(errs, a.flushLocked())
	}
	for _, r := range a.regions {
		if r != nil {
			errs = append(errs, r.close())
		}
	}
	a.regions = nil
	if a.super != nil {
		errs = append(errs, a.super.Unmap(), a.superF.Close())
		a.super = nil
	}
	errs = append(errs, a.lockF.Close())
	a.index, a.byChain = nil, nil
	return errors.Join(errs...)
}

func (r *region) close() error {
	var errs []error
	if r.mm != nil {
		errs = append(errs, r.mm.Unmap())
	}
	if r.f != nil {
		errs = append(errs, r.f.Close())
	}
	return errors.Join(errs...)
}

// ---- internals ----

// crashHook, when set (by tests only), is called at the points of Put and
// Delete between which a crash leaves a distinct state on disk; the crash
// test's child kills itself there.
var crashHook func(point string)

func crashPoint(point string) {
	if crashHook != nil {
		crashHook(point)
	}
}

func (a *Arena) scratchBuf() []byte {
	if a.scratch == nil {
		a.scratch = make([]byte, 16<<10)
	}
	return a.scratch
}

func (a *Arena) setGen(g uint64) {
	a.gen = g
	storeGen(a.super[sbGen:], g)
}

// clearEntry empties a block's index slot: the gen word first (atomically:
// from then on the slot is empty), then the rest.
func (a *Arena) clearEntry(r *rec) {
	reg, i := a.loc(r.slabs[0])
	e := a.entryAt(reg, i)
	storeGen(e[enGen:], 0)
	crashPoint("clear:gen-zeroed")
	clear(e)
}

func (a *Arena) remember(r *rec) {
	a.index[r.ID] = r
	a.byChain[r.Chain] = append(a.byChain[r.Chain], r.ID)
	a.used += int64(len(r.slabs))
	a.payload += r.Bytes
	a.kv += r.KVBytes
}

// forget drops r from the in-memory index and frees its slabs.
func (a *Arena) forget(r *rec) {
	if a.index[r.ID] == r {
		delete(a.index, r.ID)
	}
	ids := a.byChain[r.Chain]
	if i := slices.Index(ids, r.ID); i >= 0 {
		ids = slices.Delete(ids, i, i+1)
	}
	if len(ids) == 0 {
		delete(a.byChain, r.Chain)
	} else {
		a.byChain[r.Chain] = ids
	}
	a.used -= int64(len(r.slabs))
	a.payload -= r.Bytes
	a.kv -= r.KVBytes
	a.freeSlabs(r.slabs)
}

func (a *Arena) freeSlabs(slabs []uint32) {
	for _, g := range slabs {
		reg, i := a.loc(g)
		reg.setFree(i)
		a.nfree++
	}
}

// allocLocked takes n free slabs, lowest region and slab first, so that a
// fresh arena hands out contiguous runs. The caller made sure n are free.
func (a *Arena) allocLocked(n int64) []uint32 {
	out := make([]uint32, 0, n)
	for _, r := range a.regions {
		if r == nil || r.nfree == 0 {
			continue
		}
		for w := range r.free {
			for r.free[w] != 0 && int64(len(out)) < n {
				bit := int64(trailingZeros(r.free[w]))
				i := int64(w)*64 + bit
				r.setUsed(i)
				a.nfree--
				out = append(out, a.global(r, i))
			}
			if int64(len(out)) == n {
				return out
			}
		}
	}
	panic("shm: allocLocked: not enough free slabs")
}

// growLocked adds a region file: the lowest free region number, as many
// slabs as the budget allows up to a full region.
func (a *Arena) growLocked() error {
	left := a.opts.BudgetBytes - a.fileBytes()
	if left < a.meta+a.slab {
		return fmt.Errorf("%w: %d of %d budget bytes in files", ErrArenaFull, a.fileBytes(), a.opts.BudgetBytes)
	}
	idx := slices.Index(a.regions, nil)
	if idx < 0 {
		idx = len(a.regions)
	}
	n := min(a.spr, (left-a.meta)/a.slab)
	if (int64(idx)+1)*a.spr > int64(endOfChain) {
		return fmt.Errorf("%w: region numbers exhausted", ErrArenaFull)
	}
	r, err := a.createRegion(idx, n)
	if err != nil {
		return fmt.Errorf("shm: add region: %w", err)
	}
	if idx == len(a.regions) {
		a.regions = append(a.regions, r)
	} else {
		a.regions[idx] = r
	}
	a.nfree += r.nfree
	return nil
}

func (a *Arena) regionHeader(idx int, slabs int64) []byte {
	h := make([]byte, headerBytes)
	copy(h[rhMagic:], regionMagic)
	le.PutUint32(h[rhVersion:], FormatVersion)
	le.PutUint32(h[rhIndex:], uint32(idx))
	copy(h[rhArenaID:rhArenaID+16], a.arenaID[:])
	le.PutUint64(h[rhSlabBytes:], uint64(a.slab))
	le.PutUint64(h[rhSPR:], uint64(a.spr))
	le.PutUint64(h[rhSlabs:], uint64(slabs))
	le.PutUint64(h[rhMetaBytes:], uint64(a.meta))
	le.PutUint32(h[rhCRC:], crc(h[:rhCRC]))
	return h
}

func (a *Arena) createRegion(idx int, slabs int64) (*region, error) {
	path := a.regionPath(idx)
	if err := createFile(path, a.regionFileBytes(slabs), a.regionHeader(idx, slabs), a.opts.Sync); err != nil {
		return nil, err
	}
	f, m, err := mapFile(path, a.regionFileBytes(slabs))
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	r := &region{idx: idx, path: path, f: f, mm: m, slabs: slabs, free: make([]uint64, (slabs+63)/64)}
	for i := range slabs {
		r.setFree(i)
	}
	return r, nil
}

func (a *Arena) regionPath(idx int) string {
	return a.dir + string(os.PathSeparator) + fmt.Sprintf(regionPattern, idx)
}

// trimLocked removes empty regions, highest number first, while the files
// exceed the budget (after the budget shrank between opens).
func (a *Arena) trimLocked() {
	for a.fileBytes() > a.opts.BudgetBytes {
		victim := -1
		for i := len(a.regions) - 1; i >= 0; i-- {
			if r := a.regions[i]; r != nil && r.nfree == r.slabs {
				victim = i
				break
			}
		}
		if victim < 0 {
			return
		}
		a.removeRegionLocked(victim)
	}
}

// reshapeLocked removes empty regions that are shorter than the budget
// would make them now (short regions made under a smaller budget, before
// it grew); growLocked remakes them at full size on demand. It reports
// whether it removed any. In an arena whose budget never changed, no
// region qualifies: the one short region is as large as the budget allows.
func (a *Arena) reshapeLocked() bool {
	dropped := false
	for i, r := range a.regions {
		if r != nil && r.nfree == r.slabs && a.regrowSlabs(r) > r.slabs {
			a.removeRegionLocked(i)
			dropped = true
		}
	}
	return dropped
}

// regrowSlabs is the slab count r would get if it were removed and grown
// again now.
func (a *Arena) regrowSlabs(r *region) int64 {
	left := a.opts.BudgetBytes - a.fileBytes() + int64(len(r.mm))
	if left < a.meta+a.slab {
		return 0
	}
	return min(a.spr, (left-a.meta)/a.slab)
}

func (a *Arena) removeRegionLocked(i int) {
	r := a.regions[i]
	a.nfree -= r.nfree
	r.close()
	os.Remove(r.path)
	a.regions[i] = nil
	for len(a.regions) > 0 && a.regions[len(a.regions)-1] == nil {
		a.regions = a.regions[:len(a.regions)-1]
	}
}

// scan walks a block's stream slab by slab, calling fn with each piece and
// its offset in the stream, and reports whether the CRC matches.
func (a *Arena) scan(r *rec, fn func(off int64, seg []byte)) bool {
	var c uint32
	off := int64(0)
	for _, g := range r.slabs {
		reg, i := a.loc(g)
		if reg == nil {
			return false
		}
		seg := a.slabAt(reg, i)[:min(a.slab, r.Bytes-off)]
		c = crcUpdate(c, seg)
		fn(off, seg)
		off += int64(len(seg))
	}
	return c == r.crc
}

// readFailed handles a checksum failure seen by a reader: the block is
// dropped (it can never read right again) and ErrCorrupt returned.
func (a *Arena) readFailed(r *rec) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed && a.index[r.ID] == r {
		a.corruptDropped++
		a.deleteLocked(r)
	}
	return fmt.Errorf("%w: block %d fails its checksum; dropped", ErrCorrupt, r.ID)
}

func (a *Arena) syncSlabs(slabs []uint32) error {
	for _, g := range slabs {
		reg, i := a.loc(g)
		if err := msyncRange(reg.mm, a.meta+i*a.slab, a.slab); err != nil {
			return err
		}
		if err := msyncRange(reg.mm, a.nextOff(i), 4); err != nil {
			return err
		}
	}
	return nil
}

func (a *Arena) syncMeta(r *region, i int64, old *rec) error {
	var errs []error
	if r != nil {
		errs = append(errs, msyncRange(r.mm, a.entryOff(i), entryBytes))
	}
	if old != nil {
		reg, j := a.loc(old.slabs[0])
		errs = append(errs, msyncRange(reg.mm, a.entryOff(j), entryBytes))
	}
	errs = append(errs, msyncRange(a.super, sbGen, 8))
	return errors.Join(errs...)
}

// copyOverlap copies into dst (which sits at stream offset dstOff) the part
// of seg (at stream offset segOff) that overlaps it.
func copyOverlap(dst []byte, dstOff int64, seg []byte, segOff int64) {
	lo := max(dstOff, segOff)
	hi := min(dstOff+int64(len(dst)), segOff+int64(len(seg)))
	if lo < hi {
		copy(dst[lo-dstOff:hi-dstOff], seg[lo-segOff:hi-segOff])
	}
}

// streamWriter writes a block's stream across its slabs, computing the
// CRC of what it writes.
type streamWriter struct {
	a     *Arena
	slabs []uint32
	k     int   // current slab
	off   int64 // offset inside it
	crc   uint32
}

func (w *streamWriter) write(p []byte) {
	w.crc = crcUpdate(w.crc, p)
	for len(p) > 0 {
		reg, i := w.a.loc(w.slabs[w.k])
		dst := w.a.slabAt(reg, i)[w.off:]
		n := copy(dst, p)
		p = p[n:]
		w.off += int64(n)
		if w.off == w.a.slab {
			w.k++
			w.off = 0
		}
	}
}

func (w *streamWriter) writeTokens(tokens []int32, buf []byte) {
	for len(tokens) > 0 {
		n := min(len(tokens), len(buf)/4)
		for i, t := range tokens[:n] {
			le.PutUint32(buf[4*i:], uint32(t))
		}
		w.write(buf[:4*n])
		tokens = tokens[n:]
	}
}
