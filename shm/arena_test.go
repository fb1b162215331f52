package shm

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// small is a geometry that makes multi-slab blocks, several regions and a
// full arena cheap: 4 KiB slabs, regions of ~64 slabs, 1 MiB budget.
func small() Options {
	return Options{SlabBytes: 4096, RegionBytes: 64*4096 + 8192, BudgetBytes: 1 << 20, Compat: "test-model:f16"}
}

func TestChainHash(t *testing.T) {
	a := ChainHash(Hash{}, []int32{1, 2, 3})
	if a != ChainHash(Hash{}, []int32{1, 2, 3}) {
		t.Fatal("not deterministic")
	}
	if a == ChainHash(Hash{}, []int32{1, 2, 4}) || a == ChainHash(Hash{1}, []int32{1, 2, 3}) {
		t.Fatal("collision on a different input")
	}
	// Chaining commits to the prefix: [1 2][3] differs from [1][2 3].
	if ChainHash(ChainHash(Hash{}, []int32{1, 2}), []int32{3}) == ChainHash(ChainHash(Hash{}, []int32{1}), []int32{2, 3}) {
		t.Fatal("chain does not separate block boundaries")
	}
	long := make([]int32, 1000) // more than one internal buffer
	for i := range long {
		long[i] = int32(i)
	}
	if ChainHash(Hash{}, long) == ChainHash(Hash{}, long[:999]) {
		t.Fatal("long input truncated")
	}
}

func TestPutGetRoundTrip(t *testing.T) {
	dir := t.TempDir()
	a, rep := mustOpen(t, dir, small())
	defer a.Close()
	if rep.Attached || rep.Blocks != 0 || len(rep.SetAside) != 0 {
		t.Fatalf("fresh arena report: %+v", rep)
	}
	blocks := []Block{
		testBlock(1, 0, 0),              // empty
		testBlock(2, 64, 1),             // tiny
		testBlock(3, 100, 4096-160-400), // exactly one slab
		testBlock(4, 100, 4096-160-399), // one byte over
		testBlock(5, 256, 40_000),       // ten slabs
	}
	blocks[0].SegID = strings.Repeat("x", MaxSegIDLen)
	blocks[1].Pos = -5
	for _, b := range blocks {
		mustPut(t, a, b)
		mustCheck(t, a)
	}
	for _, b := range blocks {
		verify(t, a, b)
		m, ok := a.Lookup(b.ID)
		if !ok || m.NTokens != len(b.Tokens) || m.KVBytes != int64(len(b.KV)) || m.SegID != b.SegID || m.Chain != b.Chain {
			t.Fatalf("Lookup %d: %+v", b.ID, m)
		}
		if id, ok := a.FindByChainHash(b.Chain); !ok || id != b.ID {
			t.Fatalf("FindByChainHash(%d) = %d %v", b.ID, id, ok)
		}
		if !a.Has(b.ID) {
			t.Fatal("Has")
		}
	}
	if m, _ := a.Lookup(3); m.Slabs != 1 {
		t.Fatalf("block 3 uses %d slabs, want 1", m.Slabs)
	}
	if m, _ := a.Lookup(4); m.Slabs != 2 {
		t.Fatalf("block 4 uses %d slabs, want 2", m.Slabs)
	}
	list := a.List()
	if len(list) != len(blocks) || !slices.IsSortedFunc(list, func(x, y Meta) int { return int(x.ID) - int(y.ID) }) {
		t.Fatalf("List: %+v", list)
	}
	if _, err := a.Get(99); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get missing: %v", err)
	}
	if _, err := a.ReadKV(99, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadKV missing: %v", err)
	}
	if err := a.Delete(99); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Delete missing: %v", err)
	}
	if err := a.Put(Block{ID: 7, SegID: strings.Repeat("x", MaxSegIDLen+1)}); err == nil {
		t.Fatal("long segment id accepted")
	}

	// Replacing Put: same id, other content.
	nb := testBlock(5, 10, 9000)
	mustPut(t, a, nb)
	mustCheck(t, a)
	verify(t, a, nb)
	if _, ok := a.FindByChainHash(blocks[4].Chain); ok && blocks[4].Chain != nb.Chain {
		t.Fatal("old chain hash still indexed after replace")
	}

	// Files and folder modes.
	st, _ := os.Stat(dir)
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v", st.Mode())
	}
	for _, r := range a.Ranges() {
		st, err := os.Stat(r.Path)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", r.Path, st.Mode(), err)
		}
		if r.End-r.Start != uintptr(st.Size()) || (r.SlabStart-r.Start)%uintptr(os.Getpagesize()) != 0 {
			t.Fatalf("range %+v for a %d-byte file", r, st.Size())
		}
	}

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if err := a.Put(testBlock(9, 1, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put after Close: %v", err)
	}
	if _, err := a.Get(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	if err := a.Check(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Check after Close: %v", err)
	}
}

func TestSpanningAcrossRegions(t *testing.T) {
	a, _ := mustOpen(t, t.TempDir(), small())
	defer a.Close()
	// Each region holds ~64 slabs; these blocks need 30 each, so chains
	// cross region boundaries.
	var bs []Block
	for id := uint64(1); id <= 6; id++ {
		b := testBlock(id, 256, 30*4096-2000)
		mustPut(t, a, b)
		bs = append(bs, b)
	}
	mustCheck(t, a)
	if s := a.Stats(); s.Regions < 3 {
		t.Fatalf("expected several regions, got %+v", s)
	}
	crosses := false
	for _, m := range a.List() {
		a.mu.RLock()
		r := a.index[m.ID]
		for _, g := range r.slabs {
			if int64(g)/a.spr != int64(r.slabs[0])/a.spr {
				crosses = true
			}
		}
		a.mu.RUnlock()
	}
	if !crosses {
		t.Fatal("no chain crosses a region boundary")
	}
	for _, b := range bs {
		verify(t, a, b)
	}
	// The view of a fresh block in one region is one run per slab,
	// adjacent in memory.
	a.ViewKV(1, func(parts [][]byte) error {
		if len(parts) != 30 {
			t.Errorf("%d parts", len(parts))
		}
		return nil
	})
}

func TestFullDeleteReuse(t *testing.T) {
	o := small()
	a, _ := mustOpen(t, t.TempDir(), o)
	defer a.Close()
	var ids []uint64
	var err error
	for id := uint64(1); ; id++ {
		if err = a.Put(testBlock(id, 64, 20_000)); err != nil {
			break
		}
		ids = append(ids, id)
	}
	if !errors.Is(err, ErrArenaFull) {
		t.Fatalf("filling: %v", err)
	}
	mustCheck(t, a)
	s := a.Stats()
	if s.FileBytes > o.BudgetBytes {
		t.Fatalf("files %d over budget %d", s.FileBytes, o.BudgetBytes)
	}
	if s.SlabsAvailable >= 5 { // the failed block needed 5 slabs
		t.Fatalf("ErrArenaFull with %d slabs available", s.SlabsAvailable)
	}
	if s.Blocks != len(ids) || s.SlabsUsed != int64(5*len(ids)) || s.BytesUsed != s.SlabsUsed*4096 {
		t.Fatalf("stats %+v for %d blocks", s, len(ids))
	}
	t.Logf("full: %d blocks, %+v", len(ids), s)

	// A block larger than the whole budget is not "full": evicting cannot help.
	if err := a.Put(testBlock(1000, 0, 2<<20)); !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrArenaFull) {
		t.Fatalf("huge block: %v", err)
	}

	if err := a.Delete(ids[3]); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, a)
	if a.Has(ids[3]) {
		t.Fatal("deleted block still there")
	}
	if after := a.Stats(); after.SlabsUsed != s.SlabsUsed-5 || after.Generation != s.Generation+1 {
		t.Fatalf("after delete %+v", after)
	}
	// The freed slabs are reused.
	nb := testBlock(5000, 64, 20_000)
	mustPut(t, a, nb)
	mustCheck(t, a)
	verify(t, a, nb)
	if err := a.Put(testBlock(5001, 64, 20_000)); !errors.Is(err, ErrArenaFull) {
		t.Fatalf("expected full again: %v", err)
	}
	for _, id := range ids {
		if id != ids[3] {
			verify(t, a, testBlock(id, 64, 20_000))
		}
	}
}

func TestReopenKeepsBlocks(t *testing.T) {
	dir := t.TempDir()
	o := small()
	a, _ := mustOpen(t, dir, o)
	var want []Block
	for id := uint64(1); id <= 20; id++ {
		b := sizedBlock(id, 30_000)
		mustPut(t, a, b)
		want = append(want, b)
	}
	for _, id := range []uint64{3, 7, 11} {
		a.Delete(id)
	}
	want = slices.DeleteFunc(want, func(b Block) bool { return b.ID == 3 || b.ID == 7 || b.ID == 11 })
	before := a.Stats()
	listBefore := a.List()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	a, rep := mustOpen(t, dir, o)
	defer a.Close()
	if !rep.Attached || rep.Blocks != len(want) || len(rep.Dropped) != 0 || len(rep.SetAside) != 0 {
		t.Fatalf("reopen report %+v", rep)
	}
	if rep.Generation != before.Generation {
		t.Fatalf("generation %d after reopen, was %d", rep.Generation, before.Generation)
	}
	after := a.Stats()
	after.CorruptDropped, before.CorruptDropped = 0, 0
	if after != before {
		t.Fatalf("stats changed across reopen:\n%+v\n%+v", before, after)
	}
	if !slices.Equal(a.List(), listBefore) {
		t.Fatal("List changed across reopen")
	}
	for _, b := range want {
		verify(t, a, b)
	}
	// Options that disagree with the stored geometry: the stored one wins.
	a.Close()
	o2 := o
	o2.SlabBytes = 8192
	a, rep = mustOpen(t, dir, o2)
	if rep.Blocks != len(want) || len(rep.Notes) == 0 || a.Stats().SlabBytes != 4096 {
		t.Fatalf("geometry change: %+v", rep)
	}
}

func TestLocked(t *testing.T) {
	dir := t.TempDir()
	a, _ := mustOpen(t, dir, small())
	if _, _, err := Open(dir, small()); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v", err)
	}
	a.Close()
	b, _ := mustOpen(t, dir, small())
	b.Close()
}

func TestBudgetShrinkAndGrow(t *testing.T) {
	dir := t.TempDir()
	o := small()
	o.BudgetBytes = 4 << 20
	a, _ := mustOpen(t, dir, o)
	for id := uint64(1); id <= 40; id++ {
		mustPut(t, a, testBlock(id, 10, 60_000))
	}
	if s := a.Stats(); s.Regions < 8 {
		t.Fatalf("regions %d", s.Regions)
	}
	a.Close()

	// Shrink under live blocks: nothing is dropped, Put is refused.
	o.BudgetBytes = 1 << 20
	a, rep := mustOpen(t, dir, o)
	if rep.Blocks != 40 || len(rep.Notes) == 0 {
		t.Fatalf("shrink: %+v", rep)
	}
	if err := a.Put(testBlock(100, 1, 10)); !errors.Is(err, ErrArenaFull) {
		t.Fatalf("Put over a shrunk budget: %v", err)
	}
	// Evicting empties regions, which go away until the files fit.
	for id := uint64(1); id <= 40; id++ {
		if err := a.Delete(id); err != nil {
			t.Fatal(err)
		}
		mustCheck(t, a)
	}
	if s := a.Stats(); s.FileBytes > o.BudgetBytes {
		t.Fatalf("files %d over budget %d after evicting all", s.FileBytes, o.BudgetBytes)
	}
	mustPut(t, a, testBlock(100, 1, 10))
	a.Close()

	// Grow again.
	o.BudgetBytes = 8 << 20
	a, _ = mustOpen(t, dir, o)
	defer a.Close()
	for id := uint64(200); id < 300; id++ {
		mustPut(t, a, testBlock(id, 10, 60_000))
	}
	mustCheck(t, a)
	if s := a.Stats(); s.FileBytes > o.BudgetBytes {
		t.Fatal("over budget")
	}
}

func TestConcurrentUse(t *testing.T) {
	a, _ := mustOpen(t, t.TempDir(), Options{SlabBytes: 4096, RegionBytes: 1 << 20, BudgetBytes: 16 << 20})
	defer a.Close()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 64<<10)
			for i := range 200 {
				id := uint64(w*1000 + i%20)
				b := sizedBlock(id, 20_000)
				if err := a.Put(b); err != nil {
					t.Error(err)
					return
				}
				var err error
				buf, err = a.ReadKV(id, buf[:0])
				if err != nil || string(buf) != string(b.KV) {
					t.Errorf("ReadKV %d: %v", id, err)
					return
				}
				if i%7 == 0 {
					a.Delete(id)
				}
				a.Stats()
				a.List()
			}
		}()
	}
	wg.Wait()
	mustCheck(t, a)
}

func TestDirModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	a, _ := mustOpen(t, dir, small())
	defer a.Close()
	st, _ := os.Stat(dir)
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("folder left at %v", st.Mode())
	}
	if _, _, err := Open(t.TempDir(), Options{}); err == nil {
		t.Fatal("Open without a budget")
	}
	if _, _, err := Open(t.TempDir(), Options{BudgetBytes: 1 << 20, SlabBytes: 1000}); err == nil {
		t.Fatal("Open with an unaligned slab")
	}
}

// After the budget grows, a short region made under the old one is remade
// full once empty, so the arena reaches CapacitySlabs exactly.
func TestBudgetGrowthReshapes(t *testing.T) {
	dir := t.TempDir()
	o := small()
	a, _ := mustOpen(t, dir, o)
	full := a.regionFileBytes(a.spr)
	a.Close()
	o.BudgetBytes = headerBytes + full + full/2
	a, _ = mustOpen(t, dir, o)
	one := testBlock(1, 10, 1000) // one slab
	fillUp := func() int {
		n := 0
		for id := uint64(1); ; id++ {
			one.ID = id
			if err := a.Put(one); err != nil {
				if !errors.Is(err, ErrArenaFull) {
					t.Fatal(err)
				}
				return n
			}
			n++
		}
	}
	if n, c := fillUp(), a.Stats().CapacitySlabs; int64(n) != c {
		t.Fatalf("filled %d of %d", n, c)
	}
	a.Close()

	o.BudgetBytes = headerBytes + 3*full
	a, _ = mustOpen(t, dir, o)
	defer a.Close()
	for _, m := range a.List() {
		a.Delete(m.ID)
	}
	mustCheck(t, a)
	if n, c := fillUp(), a.Stats().CapacitySlabs; int64(n) != c || c != 3*a.spr {
		t.Fatalf("filled %d of %d (3 regions of %d)", n, c, a.spr)
	}
	mustCheck(t, a)
}
