package shm

import (
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fill puts blocks 1..n (sized so that each spans a few slabs) and returns
// them.
func fill(t *testing.T, a *Arena, n int) map[uint64]Block {
	t.Helper()
	bs := map[uint64]Block{}
	for id := uint64(1); id <= uint64(n); id++ {
		b := testBlock(id, 64, 9000+int(id)*100)
		mustPut(t, a, b)
		bs[id] = b
	}
	return bs
}

func expectSurvivors(t *testing.T, a *Arena, bs map[uint64]Block, lost ...uint64) {
	t.Helper()
	for id, b := range bs {
		gone := false
		for _, l := range lost {
			gone = gone || l == id
		}
		if gone {
			if a.Has(id) {
				t.Fatalf("block %d should have been dropped", id)
			}
			continue
		}
		verify(t, a, b)
	}
}

func TestFlippedByteDropsBlock(t *testing.T) {
	cases := []struct {
		name string
		off  func(b Block) int64 // stream offset to corrupt
	}{
		{"header", func(Block) int64 { return 20 }},
		{"token", func(Block) int64 { return blockHdr + 4*10 + 1 }},
		{"kv", func(b Block) int64 { return blockHdr + 4*int64(len(b.Tokens)) + 5000 }},
		{"kv-last-byte", func(b Block) int64 { return streamLength(len(b.Tokens), int64(len(b.KV))) - 1 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			a, _ := mustOpen(t, dir, small())
			bs := fill(t, a, 12)
			path, off := locate(t, a, 5, tc.off(bs[5]))
			a.Close()
			flipByte(t, path, off)

			a, rep := mustOpen(t, dir, small())
			defer a.Close()
			if len(rep.Dropped) != 1 || rep.Dropped[0].ID != 5 || !errors.Is(rep.Dropped[0].Err, ErrCorrupt) {
				t.Fatalf("report: %+v", rep)
			}
			t.Log(rep.Dropped[0])
			if rep.Blocks != 11 || !rep.Attached {
				t.Fatalf("report: %+v", rep)
			}
			expectSurvivors(t, a, bs, 5)
			// Its slabs are free again and reusable.
			mustPut(t, a, bs[5])
			mustCheck(t, a)
			verify(t, a, bs[5])
		})
	}
}

func TestFlippedByteWhileOpen(t *testing.T) {
	dir := t.TempDir()
	a, _ := mustOpen(t, dir, small())
	defer a.Close()
	bs := fill(t, a, 6)
	// A write to the file shows through the shared mapping.
	path, off := locate(t, a, 3, blockHdr+4*64+77)
	flipByte(t, path, off)
	if err := a.Check(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Check missed the flip: %v", err)
	}
	buf := make([]byte, 3, 100)
	got, err := a.ReadKV(3, buf)
	if !errors.Is(err, ErrCorrupt) || len(got) != 3 {
		t.Fatalf("ReadKV of a corrupt block: %v, %d bytes", err, len(got))
	}
	if a.Has(3) || a.Stats().CorruptDropped != 1 {
		t.Fatal("corrupt block not dropped")
	}
	mustCheck(t, a)
	expectSurvivors(t, a, bs, 3)

	path, off = locate(t, a, 4, 200)
	flipByte(t, path, off)
	if _, err := a.Get(4); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get: %v", err)
	}
	path, off = locate(t, a, 5, 9000)
	flipByte(t, path, off)
	called := false
	if err := a.ViewKV(5, func([][]byte) error { called = true; return nil }); !errors.Is(err, ErrCorrupt) || called {
		t.Fatalf("ViewKV: %v (fn called: %v)", err, called)
	}
	mustCheck(t, a)
	expectSurvivors(t, a, bs, 3, 4, 5)
}

func TestCorruptIndex(t *testing.T) {
	t.Run("entry", func(t *testing.T) {
		dir := t.TempDir()
		a, _ := mustOpen(t, dir, small())
		bs := fill(t, a, 8)
		path, off := entryFileOffset(t, a, 6)
		a.Close()
		flipByte(t, path, off+enLength)
		a, rep := mustOpen(t, dir, small())
		defer a.Close()
		if len(rep.Dropped) != 1 || !strings.Contains(rep.Dropped[0].Err.Error(), "entry checksum") {
			t.Fatalf("report: %+v", rep)
		}
		expectSurvivors(t, a, bs, 6)
	})
	t.Run("chain-link", func(t *testing.T) {
		dir := t.TempDir()
		a, _ := mustOpen(t, dir, small())
		bs := fill(t, a, 8)
		a.mu.RLock()
		r := a.index[7]
		reg, i := a.loc(r.slabs[1])
		path, off := reg.path, a.nextOff(i)
		a.mu.RUnlock()
		a.Close()
		flipByte(t, path, off)
		a, rep := mustOpen(t, dir, small())
		defer a.Close()
		if len(rep.Dropped) != 1 || rep.Dropped[0].ID != 7 {
			t.Fatalf("report: %+v", rep)
		}
		t.Log(rep.Dropped[0])
		expectSurvivors(t, a, bs, 7)
	})
	t.Run("uncommitted-garbage", func(t *testing.T) {
		// A slot with generation 0 but other bytes set (a Put killed
		// before its commit) is cleared silently.
		dir := t.TempDir()
		a, _ := mustOpen(t, dir, small())
		bs := fill(t, a, 3)
		a.mu.Lock()
		r := a.regions[0]
		e := a.entryAt(r, r.slabs-1)
		copy(e[enFirst:enCRC], "garbage, never committed") // gen stays 0
		a.mu.Unlock()
		if err := a.Check(); err == nil {
			t.Fatal("Check missed a dirty empty slot")
		}
		a.Close()
		a, rep := mustOpen(t, dir, small())
		defer a.Close()
		if len(rep.Dropped) != 0 || rep.Blocks != 3 {
			t.Fatalf("report: %+v", rep)
		}
		expectSurvivors(t, a, bs)
	})
}

func quarantined(t *testing.T, dir string) []string {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(dir, quarantineName))
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// expectFresh checks that Open set aside the old arena for want and made a
// working fresh one.
func expectFresh(t *testing.T, dir string, o Options, want error) {
	t.Helper()
	a, rep := mustOpen(t, dir, o)
	defer a.Close()
	if rep.Attached || rep.Blocks != 0 || len(rep.SetAside) == 0 {
		t.Fatalf("report: %+v", rep)
	}
	for _, s := range rep.SetAside {
		if !errors.Is(s.Err, want) || s.MovedTo == "" {
			t.Fatalf("set aside %v, want %v", s, want)
		}
		if _, err := os.Stat(s.MovedTo); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(s.Path); err == nil && filepath.Base(s.Path) != superName {
			t.Fatalf("%s still in place", s.Path)
		}
		t.Log(s)
	}
	if q := quarantined(t, dir); len(q) < len(rep.SetAside) {
		t.Fatalf("quarantine holds %v", q)
	}
	b := testBlock(42, 10, 10_000)
	mustPut(t, a, b)
	verify(t, a, b)
	mustCheck(t, a)
}

func makeArena(t *testing.T, dir string, o Options) {
	t.Helper()
	a, _ := mustOpen(t, dir, o)
	fill(t, a, 30) // several regions
	if a.Stats().Regions < 2 {
		t.Fatal("want several regions")
	}
	a.Close()
}

func TestGarbageSuperblock(t *testing.T) {
	dir := t.TempDir()
	makeArena(t, dir, small())
	junk := make([]byte, headerBytes)
	rand.Read(junk)
	os.WriteFile(filepath.Join(dir, superName), junk, 0o600)
	expectFresh(t, dir, small(), ErrCorrupt)
}

func TestTruncatedSuperblock(t *testing.T) {
	dir := t.TempDir()
	makeArena(t, dir, small())
	os.Truncate(filepath.Join(dir, superName), 10)
	expectFresh(t, dir, small(), ErrCorrupt)
}

func TestSuperblockChecksum(t *testing.T) {
	dir := t.TempDir()
	makeArena(t, dir, small())
	flipByte(t, filepath.Join(dir, superName), sbSlabBytes+1)
	expectFresh(t, dir, small(), ErrCorrupt)
}

func TestForeignVersion(t *testing.T) {
	dir := t.TempDir()
	makeArena(t, dir, small())
	path := filepath.Join(dir, superName)
	b, _ := os.ReadFile(path)
	le.PutUint32(b[sbVersion:], FormatVersion+1)
	le.PutUint32(b[sbCRC:], crc(b[:sbCRC])) // a well-formed superblock of another version
	os.WriteFile(path, b, 0o600)
	expectFresh(t, dir, small(), ErrForeign)
}

func TestForeignCompat(t *testing.T) {
	dir := t.TempDir()
	makeArena(t, dir, small())
	o := small()
	o.Compat = "other-model:q8_0"
	expectFresh(t, dir, o, ErrForeign)
	// And back: the arena made under the other key is foreign too.
	expectFresh(t, dir, small(), ErrForeign)
}

func TestOrphanRegions(t *testing.T) {
	dir := t.TempDir()
	makeArena(t, dir, small())
	os.Remove(filepath.Join(dir, superName))
	expectFresh(t, dir, small(), ErrForeign)
}

func TestForeignRegion(t *testing.T) {
	other := t.TempDir()
	makeArena(t, other, small())
	dir := t.TempDir()
	a, _ := mustOpen(t, dir, small())
	bs := fill(t, a, 5)
	a.Close()
	// A region file of another arena (same compat key, same geometry)
	// dropped into this folder under a free number.
	data, _ := os.ReadFile(filepath.Join(other, "region-000001.shm"))
	os.WriteFile(filepath.Join(dir, "region-000007.shm"), data, 0o600)
	a, rep := mustOpen(t, dir, small())
	defer a.Close()
	if len(rep.SetAside) != 1 || !errors.Is(rep.SetAside[0].Err, ErrForeign) || rep.Blocks != 5 || !rep.Attached {
		t.Fatalf("report: %+v", rep)
	}
	expectSurvivors(t, a, bs)
}

func TestCorruptRegionHeader(t *testing.T) {
	dir := t.TempDir()
	a, _ := mustOpen(t, dir, small())
	bs := map[uint64]Block{}
	for id := uint64(1); id <= 30; id++ { // 5 slabs each: chains cross regions
		bs[id] = testBlock(id, 64, 18_000)
		mustPut(t, a, bs[id])
	}
	// Blocks with a slab in region 1 are lost with it; the others stay.
	var lost []uint64
	a.mu.RLock()
	for id, r := range a.index {
		for _, g := range r.slabs {
			if int64(g)/a.spr == 1 {
				lost = append(lost, id)
				break
			}
		}
	}
	a.mu.RUnlock()
	a.Close()
	flipByte(t, filepath.Join(dir, "region-000001.shm"), rhSlabs)
	a, rep := mustOpen(t, dir, small())
	defer a.Close()
	// Entries that lived in region 1 go with it (reported as the set-aside
	// file); entries elsewhere whose chains reach into it are dropped.
	if len(rep.SetAside) != 1 || !errors.Is(rep.SetAside[0].Err, ErrCorrupt) || rep.Blocks != 30-len(lost) || len(lost) == 0 {
		t.Fatalf("report (lost %v): %+v", lost, rep)
	}
	for _, d := range rep.Dropped {
		if !slices.Contains(lost, d.ID) {
			t.Fatalf("dropped %v", d)
		}
	}
	if len(rep.Dropped) == 0 {
		t.Fatal("no block that started in region 0 crossed into region 1")
	}
	t.Logf("lost %d blocks, %d of them reported as dropped: %v", len(lost), len(rep.Dropped), rep.Dropped)
	expectSurvivors(t, a, bs, lost...)
	// The hole is refilled by a new region when needed.
	for id := uint64(100); id < 120; id++ {
		mustPut(t, a, testBlock(id, 64, 9000))
	}
	mustCheck(t, a)
}

func TestStaleTempFilesRemoved(t *testing.T) {
	dir := t.TempDir()
	makeArena(t, dir, small())
	stale := filepath.Join(dir, "region-000009.shm"+tmpSuffix)
	os.WriteFile(stale, []byte("half made"), 0o600)
	keep := filepath.Join(dir, "notes.txt")
	os.WriteFile(keep, []byte("not ours"), 0o600)
	a, rep := mustOpen(t, dir, small())
	defer a.Close()
	if rep.Blocks != 30 || len(rep.SetAside) != 0 {
		t.Fatalf("report: %+v", rep)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Fatal("stale temp file left")
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatal("foreign file touched")
	}
}

// TestCheckDetects breaks one invariant at a time behind the Arena's back
// and expects Check to name it: Check is not vacuous.
func TestCheckDetects(t *testing.T) {
	cases := []struct {
		inv    string
		break_ func(a *Arena)
	}{
		{"I1", func(a *Arena) { storeGen(a.super[sbGen:], a.gen+5) }},
		{"I1", func(a *Arena) { a.super[sbCompatText] ^= 1 }},
		{"I2", func(a *Arena) { a.regions[0].mm[rhIndex] ^= 1 }},
		{"I3", func(a *Arena) { e := a.entryAt(a.regions[0], 0); e[enLength] ^= 1 }},
		{"I3", func(a *Arena) { delete(a.byChain, a.index[2].Chain) }},
		{"I3", func(a *Arena) { r := a.regions[0]; a.entryAt(r, r.slabs-1)[enFirst] = 1 }},
		{"I4", func(a *Arena) {
			r := a.index[3]
			reg, i := a.loc(r.slabs[0])
			le.PutUint32(a.nextAt(reg, i), r.slabs[0])
		}},
		{"I5", func(a *Arena) { a.index[1].Gen = a.index[2].Gen }},
		{"I6", func(a *Arena) { r := a.index[2]; reg, i := a.loc(r.slabs[1]); reg.free[i/64] |= 1 << (i % 64) }},
		{"I6", func(a *Arena) {
			for _, reg := range a.regions {
				if reg.nfree > 0 {
					for i := range reg.slabs {
						if reg.isFree(i) {
							reg.free[i/64] &^= 1 << (i % 64) // leaked
							return
						}
					}
				}
			}
		}},
		{"I6", func(a *Arena) { a.used++ }},
		{"I7", func(a *Arena) { r := a.index[4]; reg, i := a.loc(r.slabs[len(r.slabs)-1]); a.slabAt(reg, i)[0] ^= 1 }},
		{"I7", func(a *Arena) { a.index[4].Pos++ }},
	}
	for _, tc := range cases {
		a, _ := mustOpen(t, t.TempDir(), small())
		fill(t, a, 6)
		a.Delete(5)
		mustCheck(t, a)
		a.mu.Lock()
		tc.break_(a)
		a.mu.Unlock()
		err := a.Check()
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.inv+" ") {
			t.Errorf("%s: Check returned %v", tc.inv, err)
		}
		a.Close()
	}
}
