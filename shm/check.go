package shm

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
)

// Check verifies every invariant of doc.go against the mapped files and
// the in-memory index, reading every block in full. It returns nil or an
// error wrapping ErrCorrupt that lists the violations (the first 32). It
// changes nothing. Its cost is a read of the whole arena: for tests and
// diagnostics, not the hot path.
func (a *Arena) Check() error {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return ErrClosed
	}
	var errs []error
	nerr := 0
	fail := func(format string, args ...any) {
		nerr++
		if len(errs) < 32 {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}

	// I1: the superblock.
	if err := a.checkSuper(a.super); err != nil {
		fail("I1 superblock: %v", err)
	}
	if g := loadGen(a.super[sbGen:]); g != a.gen {
		fail("I1 superblock generation %d, in memory %d", g, a.gen)
	}

	// I2: region files.
	used := make([][]uint64, len(a.regions))
	var fileBytes int64 = headerBytes
	for idx, r := range a.regions {
		if r == nil {
			continue
		}
		if r.idx != idx {
			fail("I2 region in slot %d says %d", idx, r.idx)
			continue
		}
		if err := a.checkRegionHeader(r.mm, idx); err != nil {
			fail("I2 region %d: %v", idx, err)
			continue
		}
		if st, err := r.f.Stat(); err != nil || st.Size() != int64(len(r.mm)) {
			fail("I2 region %d: file size changed under the mapping (%v)", idx, err)
		}
		if int64(le.Uint64(r.mm[rhSlabs:])) != r.slabs || int64(len(r.free)) != (r.slabs+63)/64 {
			fail("I2 region %d: slab count %d disagrees with the header", idx, r.slabs)
			continue
		}
		used[idx] = make([]uint64, len(r.free))
		fileBytes += int64(len(r.mm))
	}
	if len(a.regions) > 0 && a.regions[len(a.regions)-1] == nil {
		fail("I2 trailing empty region slot")
	}
	if fileBytes != a.fileBytes() {
		fail("I2 file bytes %d, accounted %d", fileBytes, a.fileBytes())
	}

	// I3–I6: every indexed block.
	gens := map[uint64]uint64{}
	var usedSlabs, payload, kv int64
	for id, r := range a.index {
		if r.ID != id {
			fail("I3 index key %d holds block %d", id, r.ID)
		}
		if len(r.slabs) != r.Slabs || r.Bytes < blockHdr || int64(r.Slabs) != (r.Bytes+a.slab-1)/a.slab ||
			r.Bytes != streamLength(r.NTokens, r.KVBytes) {
			fail("I4 block %d: %d slabs (%d listed) for %d bytes", id, r.Slabs, len(r.slabs), r.Bytes)
			continue
		}
		if r.Gen == 0 || r.Gen > a.gen {
			fail("I5 block %d: generation %d outside (0, %d]", id, r.Gen, a.gen)
		}
		if other, dup := gens[r.Gen]; dup {
			fail("I5 blocks %d and %d share generation %d", id, other, r.Gen)
		}
		gens[r.Gen] = id
		usedSlabs += int64(r.Slabs)
		payload += r.Bytes
		kv += r.KVBytes
		if !slices.Contains(a.byChain[r.Chain], id) {
			fail("I3 block %d missing from the chain-hash map", id)
		}

		// The entry.
		reg, i := a.loc(r.slabs[0])
		if reg == nil || used[reg.idx] == nil {
			fail("I4 block %d: first slab %d outside the arena", id, r.slabs[0])
			continue
		}
		e := a.entryAt(reg, i)
		switch {
		case crc(e[:enCRC]) != le.Uint32(e[enCRC:]):
			fail("I3 block %d: index entry checksum mismatch", id)
		case le.Uint64(e[enID:]) != id || le.Uint64(e[enGen:]) != r.Gen || le.Uint32(e[enFirst:]) != r.slabs[0] ||
			int(le.Uint32(e[enSlabs:])) != r.Slabs || int64(le.Uint64(e[enLength:])) != r.Bytes ||
			le.Uint32(e[enBlockCRC:]) != r.crc:
			fail("I3 block %d: index entry disagrees with memory", id)
		}

		// The chain: inside the arena, disjoint from every other chain,
		// linked in order and terminated.
		chainOK := true
		for k, g := range r.slabs {
			reg, i := a.loc(g)
			if reg == nil || used[reg.idx] == nil {
				fail("I4 block %d: slab %d outside the arena", id, g)
				chainOK = false
				break
			}
			if used[reg.idx][i/64]&(1<<(i%64)) != 0 {
				fail("I6 slab %d used twice (block %d)", g, id)
				chainOK = false
			}
			used[reg.idx][i/64] |= 1 << (i % 64)
			want := endOfChain
			if k+1 < len(r.slabs) {
				want = r.slabs[k+1]
			}
			if got := le.Uint32(a.nextAt(reg, i)); got != want {
				fail("I4 block %d: slab %d links to %d, want %d", id, g, got, want)
				chainOK = false
			}
		}
		if !chainOK {
			continue
		}

		// The stream: header matches memory, checksum matches the entry.
		m, ok := decodeBlockHeader(a.slabAt(reg, i))
		m.Bytes, m.Slabs, m.Gen = r.Bytes, r.Slabs, r.Gen
		if !ok || m != r.Meta {
			fail("I7 block %d: stored header %+v disagrees with memory %+v", id, m, r.Meta)
		}
		if !a.scan(r, func(int64, []byte) {}) {
			fail("I7 block %d: checksum mismatch", id)
		}
	}
	nChain := 0
	for h, ids := range a.byChain {
		for _, id := range ids {
			nChain++
			if r := a.index[id]; r == nil || r.Chain != h {
				fail("I3 chain-hash map lists block %d under a hash it does not have", id)
			}
		}
	}
	if nChain != len(a.index) {
		fail("I3 chain-hash map has %d ids, index %d", nChain, len(a.index))
	}

	// I3: entry slots: empty ones are all zero, committed ones are indexed.
	live := 0
	for _, r := range a.regions {
		if r == nil || used[r.idx] == nil {
			continue
		}
		for i := range a.spr {
			e := a.entryAt(r, i)
			if le.Uint64(e[enGen:]) == 0 {
				if !allZero(e) {
					fail("I3 region %d slot %d: empty entry not zeroed", r.idx, i)
				}
				continue
			}
			live++
			id := le.Uint64(e[enID:])
			if rc := a.index[id]; rc == nil || rc.slabs[0] != a.global(r, i) {
				fail("I3 region %d slot %d: committed entry for block %d not in the index", r.idx, i, id)
			}
		}
	}
	if live != len(a.index) {
		fail("I3 %d committed entries, %d indexed blocks", live, len(a.index))
	}

	// I6: the free set and the used slabs partition every slab.
	var nfree int64
	for _, r := range a.regions {
		if r == nil || used[r.idx] == nil {
			continue
		}
		var rfree int64
		for w := range r.free {
			valid := ^uint64(0)
			if rem := r.slabs - int64(w)*64; rem < 64 {
				valid = 1<<rem - 1
			}
			if r.free[w]&^valid != 0 {
				fail("I6 region %d: free bits past slab %d", r.idx, r.slabs)
			}
			if both := r.free[w] & used[r.idx][w]; both != 0 {
				fail("I6 region %d: slab %d both free and used", r.idx, int64(w)*64+int64(bits.TrailingZeros64(both)))
			}
			if neither := valid &^ (r.free[w] | used[r.idx][w]); neither != 0 {
				fail("I6 region %d: slab %d neither free nor used (leaked)", r.idx, int64(w)*64+int64(bits.TrailingZeros64(neither)))
			}
			rfree += int64(bits.OnesCount64(r.free[w]))
		}
		if rfree != r.nfree {
			fail("I6 region %d: %d free slabs counted %d", r.idx, rfree, r.nfree)
		}
		nfree += rfree
	}
	if nfree != a.nfree || usedSlabs != a.used || payload != a.payload || kv != a.kv {
		fail("I6 totals: free %d/%d used %d/%d payload %d/%d kv %d/%d",
			nfree, a.nfree, usedSlabs, a.used, payload, a.payload, kv, a.kv)
	}

	// I8: the budget.
	for _, r := range a.regions {
		if r != nil && used[r.idx] != nil && r.nfree == r.slabs && a.regrowSlabs(r) > r.slabs {
			fail("I8 region %d is empty and short (%d slabs, the budget allows %d)", r.idx, r.slabs, a.regrowSlabs(r))
		}
	}
	if fb := a.fileBytes(); fb > a.opts.BudgetBytes {
		var empty bool
		for _, r := range a.regions {
			if r != nil && r.nfree == r.slabs {
				empty = true
			}
		}
		if empty {
			fail("I8 files %d bytes over the budget %d while an empty region remains", fb, a.opts.BudgetBytes)
		}
	}

	if nerr == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d invariant violations: %w", ErrCorrupt, nerr, errors.Join(errs...))
}
