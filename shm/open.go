package shm

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Open attaches the arena in dir, creating dir (mode 0700) and a fresh
// arena if there is none. It takes an exclusive lock (ErrLocked if another
// Open holds it), verifies every file header and every block's checksum,
// drops the index entries that fail (Report.Dropped), moves files that are
// corrupt or foreign (other format version, other arena, other
// Options.Compat) to dir/quarantine/ (Report.SetAside) and creates a fresh
// arena in their place. The returned error is only for what Open cannot
// repair (bad options, I/O errors, the lock).
func Open(dir string, o Options) (*Arena, Report, error) {
	var rep Report
	page := int64(os.Getpagesize())
	if o.BudgetBytes <= 0 {
		return nil, rep, errors.New("shm: Options.BudgetBytes is required")
	}
	if o.SlabBytes == 0 {
		o.SlabBytes = 64 << 10
	}
	if o.RegionBytes == 0 {
		o.RegionBytes = 256 << 20
	}
	if o.SlabBytes < page || o.SlabBytes%page != 0 {
		return nil, rep, fmt.Errorf("shm: SlabBytes %d is not a multiple of the page size %d", o.SlabBytes, page)
	}
	spr, meta := geometryFor(o.SlabBytes, o.RegionBytes, page)
	if spr < 1 {
		return nil, rep, fmt.Errorf("shm: RegionBytes %d holds no slab of %d bytes", o.RegionBytes, o.SlabBytes)
	}
	if o.BudgetBytes < headerBytes+meta+o.SlabBytes {
		return nil, rep, fmt.Errorf("shm: BudgetBytes %d holds no slab (need at least %d)", o.BudgetBytes, headerBytes+meta+o.SlabBytes)
	}
	dir = filepath.Clean(dir)
	if err := prepareDir(dir); err != nil {
		return nil, rep, err
	}
	lockF, err := lockDir(dir)
	if err != nil {
		return nil, rep, err
	}
	a := &Arena{dir: dir, opts: o, page: page, lockF: lockF,
		index: map[uint64]*rec{}, byChain: map[Hash][]uint64{},
		compatHash: sha256.Sum256([]byte(o.Compat))}
	ok := false
	defer func() {
		if !ok {
			a.Close()
		}
	}()
	removeTemps(dir)

	attached, err := a.attachSuper(&rep)
	if err != nil {
		return nil, rep, err
	}
	if attached {
		if a.slab != o.SlabBytes || a.spr != spr {
			rep.Notes = append(rep.Notes, fmt.Sprintf("arena geometry (slab %d bytes, %d slabs per region) kept; options asked for slab %d bytes, region %d bytes",
				a.slab, a.spr, o.SlabBytes, o.RegionBytes))
		}
	} else {
		a.slab, a.spr, a.meta = o.SlabBytes, spr, meta
		if err := a.createSuper(); err != nil {
			return nil, rep, fmt.Errorf("shm: create superblock: %w", err)
		}
	}
	a.capSlabs = a.capacityFor(o.BudgetBytes)
	if a.capSlabs < 1 {
		return nil, rep, fmt.Errorf("shm: BudgetBytes %d holds no slab of the arena's geometry", o.BudgetBytes)
	}
	if err := a.attachRegions(&rep); err != nil {
		return nil, rep, err
	}
	a.rebuild(&rep)
	a.trimLocked()
	a.reshapeLocked()
	if a.used > a.capSlabs {
		rep.Notes = append(rep.Notes, fmt.Sprintf("blocks use %d slabs, the budget holds %d: evict before Put succeeds", a.used, a.capSlabs))
	}
	if a.opts.Sync {
		if err := a.flushLocked(); err != nil {
			return nil, rep, fmt.Errorf("shm: msync: %w", err)
		}
	}
	rep.Attached = attached
	rep.Blocks = len(a.index)
	rep.Generation = a.gen
	ok = true
	return a, rep, nil
}

// attachSuper maps and validates the superblock. false: there is none
// usable (anything there was set aside) and a fresh arena must be made.
func (a *Arena) attachSuper(rep *Report) (bool, error) {
	path := filepath.Join(a.dir, superName)
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		a.setAsideAll(rep, fmt.Errorf("%w: region file without a superblock", ErrForeign), false)
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("shm: superblock: %w", err)
	}
	f, m, err := mapFile(path, headerBytes)
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			a.setAsideAll(rep, err, true)
			return false, nil
		}
		return false, fmt.Errorf("shm: superblock: %w", err)
	}
	if cause := a.checkSuper(m); cause != nil {
		m.Unmap()
		f.Close()
		a.setAsideAll(rep, cause, true)
		return false, nil
	}
	a.superF, a.super = f, m
	a.slab = int64(le.Uint64(m[sbSlabBytes:]))
	a.spr = int64(le.Uint64(m[sbSPR:]))
	a.meta = int64(le.Uint64(m[sbMetaBytes:]))
	copy(a.arenaID[:], m[sbArenaID:sbArenaID+16])
	a.gen = loadGen(m[sbGen:])
	return true, nil
}

// checkSuper validates a superblock against this build and Options.Compat.
func (a *Arena) checkSuper(m []byte) error {
	if len(m) != headerBytes {
		return fmt.Errorf("%w: superblock is %d bytes", ErrCorrupt, len(m))
	}
	if string(m[sbMagic:sbMagic+8]) != superMagic {
		return fmt.Errorf("%w: superblock: bad magic %q", ErrCorrupt, m[sbMagic:sbMagic+8])
	}
	if v := le.Uint32(m[sbVersion:]); v != FormatVersion {
		return fmt.Errorf("%w: superblock: format version %d, this build reads %d", ErrForeign, v, FormatVersion)
	}
	if got, want := le.Uint32(m[sbCRC:]), crc(m[:sbCRC]); got != want {
		return fmt.Errorf("%w: superblock: checksum %08x, computed %08x", ErrCorrupt, got, want)
	}
	if f := le.Uint32(m[sbFlags:]); f != 0 {
		return fmt.Errorf("%w: superblock: unknown flags %#x", ErrForeign, f)
	}
	slab, spr, meta := int64(le.Uint64(m[sbSlabBytes:])), int64(le.Uint64(m[sbSPR:])), int64(le.Uint64(m[sbMetaBytes:]))
	if slab < a.page || slab%a.page != 0 || spr < 1 || spr > 1<<30 || meta != metaBytesFor(spr, a.page) {
		return fmt.Errorf("%w: superblock: geometry slab=%d spr=%d meta=%d on page size %d", ErrCorrupt, slab, spr, meta, a.page)
	}
	if !bytes.Equal(m[sbCompatHash:sbCompatHash+32], a.compatHash[:]) {
		n := min(int(le.Uint32(m[sbCompatLen:])), compatTextN)
		return fmt.Errorf("%w: arena made under compat key %q, want %q", ErrForeign,
			m[sbCompatText:sbCompatText+n], a.opts.Compat[:min(len(a.opts.Compat), compatTextN)])
	}
	return nil
}

// setAsideAll moves the superblock (if withSuper) and every region file
// to quarantine/.
func (a *Arena) setAsideAll(rep *Report, cause error, withSuper bool) {
	var paths []string
	if withSuper {
		paths = append(paths, filepath.Join(a.dir, superName))
	}
	ents, _ := os.ReadDir(a.dir)
	for _, e := range ents {
		if _, ok := parseRegionName(e.Name()); ok {
			paths = append(paths, filepath.Join(a.dir, e.Name()))
		}
	}
	for _, p := range paths {
		rep.SetAside = append(rep.SetAside, setAside(a.dir, p, cause))
	}
}

func (a *Arena) createSuper() error {
	if _, err := rand.Read(a.arenaID[:]); err != nil {
		return err
	}
	h := make([]byte, headerBytes)
	copy(h[sbMagic:], superMagic)
	le.PutUint32(h[sbVersion:], FormatVersion)
	le.PutUint64(h[sbSlabBytes:], uint64(a.slab))
	le.PutUint64(h[sbSPR:], uint64(a.spr))
	le.PutUint64(h[sbMetaBytes:], uint64(a.meta))
	copy(h[sbArenaID:sbArenaID+16], a.arenaID[:])
	le.PutUint64(h[sbCreated:], uint64(time.Now().UnixNano()))
	copy(h[sbCompatHash:sbCompatHash+32], a.compatHash[:])
	le.PutUint32(h[sbCompatLen:], uint32(min(len(a.opts.Compat), 1<<31)))
	copy(h[sbCompatText:sbCompatText+compatTextN], a.opts.Compat)
	le.PutUint32(h[sbCRC:], crc(h[:sbCRC]))
	path := filepath.Join(a.dir, superName)
	if err := createFile(path, headerBytes, h, a.opts.Sync); err != nil {
		return err
	}
	f, m, err := mapFile(path, headerBytes)
	if err != nil {
		return err
	}
	a.superF, a.super, a.gen = f, m, 0
	return nil
}

func parseRegionName(name string) (int, bool) {
	if !strings.HasPrefix(name, "region-") || !strings.HasSuffix(name, ".shm") {
		return 0, false
	}
	var n int
	if _, err := fmt.Sscanf(name, regionPattern, &n); err != nil || n < 0 || fmt.Sprintf(regionPattern, n) != name {
		return 0, false
	}
	return n, true
}

// attachRegions maps every valid region file; the others are set aside.
func (a *Arena) attachRegions(rep *Report) error {
	ents, err := os.ReadDir(a.dir)
	if err != nil {
		return fmt.Errorf("shm: %w", err)
	}
	for _, e := range ents {
		idx, ok := parseRegionName(e.Name())
		if !ok {
			continue
		}
		path := filepath.Join(a.dir, e.Name())
		if !e.Type().IsRegular() {
			rep.SetAside = append(rep.SetAside, setAside(a.dir, path, fmt.Errorf("%w: %s is not a regular file", ErrCorrupt, path)))
			continue
		}
		f, m, err := mapFile(path, -1)
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				rep.SetAside = append(rep.SetAside, setAside(a.dir, path, err))
				continue
			}
			return fmt.Errorf("shm: region %s: %w", path, err)
		}
		if cause := a.checkRegionHeader(m, idx); cause != nil {
			m.Unmap()
			f.Close()
			rep.SetAside = append(rep.SetAside, setAside(a.dir, path, fmt.Errorf("%s: %w", e.Name(), cause)))
			continue
		}
		slabs := int64(le.Uint64(m[rhSlabs:]))
		r := &region{idx: idx, path: path, f: f, mm: m, slabs: slabs, free: make([]uint64, (slabs+63)/64)}
		for len(a.regions) <= idx {
			a.regions = append(a.regions, nil)
		}
		a.regions[idx] = r
	}
	return nil
}

// checkRegionHeader validates a region file's header and size against the
// superblock.
func (a *Arena) checkRegionHeader(m []byte, idx int) error {
	if len(m) < headerBytes {
		return fmt.Errorf("%w: region file is %d bytes", ErrCorrupt, len(m))
	}
	if string(m[rhMagic:rhMagic+8]) != regionMagic {
		return fmt.Errorf("%w: region: bad magic %q", ErrCorrupt, m[rhMagic:rhMagic+8])
	}
	if v := le.Uint32(m[rhVersion:]); v != FormatVersion {
		return fmt.Errorf("%w: region: format version %d, this build reads %d", ErrForeign, v, FormatVersion)
	}
	if got, want := le.Uint32(m[rhCRC:]), crc(m[:rhCRC]); got != want {
		return fmt.Errorf("%w: region: header checksum %08x, computed %08x", ErrCorrupt, got, want)
	}
	if !bytes.Equal(m[rhArenaID:rhArenaID+16], a.arenaID[:]) {
		return fmt.Errorf("%w: region belongs to another arena", ErrForeign)
	}
	if n := le.Uint32(m[rhIndex:]); int(n) != idx {
		return fmt.Errorf("%w: region header says region %d, file name %d", ErrCorrupt, n, idx)
	}
	slab, spr, slabs, meta := int64(le.Uint64(m[rhSlabBytes:])), int64(le.Uint64(m[rhSPR:])), int64(le.Uint64(m[rhSlabs:])), int64(le.Uint64(m[rhMetaBytes:]))
	if slab != a.slab || spr != a.spr || meta != a.meta {
		return fmt.Errorf("%w: region geometry slab=%d spr=%d meta=%d, superblock %d/%d/%d", ErrCorrupt, slab, spr, meta, a.slab, a.spr, a.meta)
	}
	if slabs < 1 || slabs > spr || (int64(idx)+1)*spr > int64(endOfChain) {
		return fmt.Errorf("%w: region %d holds %d slabs (at most %d)", ErrCorrupt, idx, slabs, spr)
	}
	if want := a.regionFileBytes(slabs); int64(len(m)) != want {
		return fmt.Errorf("%w: region file is %d bytes, header says %d", ErrCorrupt, len(m), want)
	}
	return nil
}

// rebuild rebuilds the in-memory index from the entry tables. Entries are
// taken newest generation first; each must pass its own checksum, walk a
// well-formed chain of slabs no newer entry claimed, and match its block's
// checksum. The rest are cleared (and reported unless merely superseded by
// a newer Put of the same id, which a crash during a replacing Put leaves).
func (a *Arena) rebuild(rep *Report) {
	type cand struct {
		r      *region
		i      int64
		id     uint64
		gen    uint64
		first  uint32
		n      int64
		length int64
		crc    uint32
	}
	var cands []cand
	changed := false
	maxGen := a.gen
	drop := func(r *region, i int64, id uint64, err error) {
		e := a.entryAt(r, i)
		storeGen(e[enGen:], 0)
		clear(e)
		changed = true
		rep.Dropped = append(rep.Dropped, DroppedBlock{ID: id, Path: r.path, Slot: int(i), Err: err})
	}
	for _, r := range a.regions {
		if r == nil {
			continue
		}
		for i := range a.spr {
			e := a.entryAt(r, i)
			gen := le.Uint64(e[enGen:])
			id := le.Uint64(e[enID:])
			if gen == 0 {
				if !allZero(e) { // an uncommitted Put
					clear(e)
					changed = true
				}
				continue
			}
			switch {
			case crc(e[:enCRC]) != le.Uint32(e[enCRC:]):
				drop(r, i, id, fmt.Errorf("%w: index entry checksum mismatch", ErrCorrupt))
				continue
			case i >= r.slabs:
				drop(r, i, id, fmt.Errorf("%w: index entry in slot %d past the region's %d slabs", ErrCorrupt, i, r.slabs))
				continue
			case le.Uint32(e[enFlags:]) != 0 || !allZero(e[40:enCRC]):
				drop(r, i, id, fmt.Errorf("%w: index entry has unknown flags", ErrCorrupt))
				continue
			}
			maxGen = max(maxGen, gen)
			cands = append(cands, cand{r: r, i: i, id: id, gen: gen,
				first: le.Uint32(e[enFirst:]), n: int64(le.Uint32(e[enSlabs:])),
				length: int64(le.Uint64(e[enLength:])), crc: le.Uint32(e[enBlockCRC:])})
		}
	}
	slices.SortFunc(cands, func(x, y cand) int {
		switch {
		case x.gen > y.gen:
			return -1
		case x.gen < y.gen:
			return 1
		}
		return 0
	})

	claimed := make([][]uint64, len(a.regions))
	for i, r := range a.regions {
		if r != nil {
			claimed[i] = make([]uint64, len(r.free))
		}
	}
	isClaimed := func(r *region, i int64) bool { return claimed[r.idx][i/64]&(1<<(i%64)) != 0 }
	setClaim := func(r *region, i int64, on bool) {
		if on {
			claimed[r.idx][i/64] |= 1 << (i % 64)
		} else {
			claimed[r.idx][i/64] &^= 1 << (i % 64)
		}
	}
	var lastKept uint64
	for _, c := range cands {
		if old := a.index[c.id]; old != nil {
			e := a.entryAt(c.r, c.i)
			storeGen(e[enGen:], 0)
			clear(e)
			changed = true
			rep.Notes = append(rep.Notes, fmt.Sprintf("block %d: older copy (generation %d) superseded by generation %d, cleared", c.id, c.gen, old.Gen))
			continue
		}
		fail := func(format string, args ...any) {
			drop(c.r, c.i, c.id, fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...))
		}
		if c.first != a.global(c.r, c.i) {
			fail("index entry names slab %d, sits in slot of slab %d", c.first, a.global(c.r, c.i))
			continue
		}
		if c.gen == lastKept {
			fail("generation %d used twice", c.gen)
			continue
		}
		if c.length < blockHdr || c.n < 1 || c.n != (c.length+a.slab-1)/a.slab {
			fail("index entry: %d slabs for %d bytes", c.n, c.length)
			continue
		}
		// Walk the chain, claiming slabs; undo on failure.
		chain := make([]uint32, 0, c.n)
		g := c.first
		var bad error
		for k := range c.n {
			reg, i := a.loc(g)
			if reg == nil {
				bad = fmt.Errorf("%w: chain reaches slab %d outside the arena", ErrCorrupt, g)
				break
			}
			if isClaimed(reg, i) {
				bad = fmt.Errorf("%w: chain reaches slab %d, already used", ErrCorrupt, g)
				break
			}
			setClaim(reg, i, true)
			chain = append(chain, g)
			next := le.Uint32(a.nextAt(reg, i))
			if k == c.n-1 {
				if next != endOfChain {
					bad = fmt.Errorf("%w: chain of %d slabs not terminated", ErrCorrupt, c.n)
				}
			} else {
				g = next
			}
		}
		var m Meta
		if bad == nil {
			r0, i0 := a.loc(c.first)
			var ok bool
			m, ok = decodeBlockHeader(a.slabAt(r0, i0))
			switch {
			case !ok:
				bad = fmt.Errorf("%w: malformed block header", ErrCorrupt)
			case m.ID != c.id:
				bad = fmt.Errorf("%w: block header says id %d", ErrCorrupt, m.ID)
			case streamLength(m.NTokens, m.KVBytes) != c.length:
				bad = fmt.Errorf("%w: block header implies %d bytes, index entry %d", ErrCorrupt, streamLength(m.NTokens, m.KVBytes), c.length)
			}
		}
		if bad == nil {
			m.Bytes, m.Slabs, m.Gen = c.length, len(chain), c.gen
			r := &rec{Meta: m, slabs: chain, crc: c.crc}
			if !a.scan(r, func(int64, []byte) {}) {
				bad = fmt.Errorf("%w: block checksum mismatch", ErrCorrupt)
			} else {
				a.remember(r)
				lastKept = c.gen
				continue
			}
		}
		for _, g := range chain {
			reg, i := a.loc(g)
			setClaim(reg, i, false)
		}
		drop(c.r, c.i, c.id, bad)
	}

	a.nfree = 0
	for _, r := range a.regions {
		if r == nil {
			continue
		}
		r.nfree = 0
		clear(r.free)
		for i := range r.slabs {
			if !isClaimed(r, i) {
				r.setFree(i)
			}
		}
		a.nfree += r.nfree
	}

	if maxGen > a.gen {
		rep.Notes = append(rep.Notes, fmt.Sprintf("generation %d recovered from the index (superblock had %d)", maxGen, a.gen))
		changed = true
	}
	if changed {
		a.setGen(maxGen + 1)
	}
}
