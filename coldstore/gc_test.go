package coldstore

import (
	"context"
	"errors"
	"testing"
	"time"
)

// sameSizeBlocks returns n blocks whose files have the same size (same
// length of f16-like data) and that size.
func sameSizeBlocks(t *testing.T, n int) ([]testBlock, int64) {
	t.Helper()
	s, _ := openStore(t, Config{Dir: t.TempDir()})
	var bl []testBlock
	var size int64
	for i := range n {
		b := makeBlock(i, 20000)
		b.meta.Tokens = b.meta.Tokens[:16] // same header size
		bl = append(bl, b)
		mustPut(t, s, b)
		st := s.Stats()
		if i == 0 {
			size = st.Bytes
		}
	}
	if s.Stats().Bytes > size*int64(n)+int64(n)*64 || s.Stats().Bytes < size*int64(n)-int64(n)*64 {
		t.Logf("block sizes vary: %d total for %d × %d", s.Stats().Bytes, n, size)
	}
	return bl, size + 64 // slack for small size differences
}

func TestGCLeastRecentlyUsed(t *testing.T) {
	ctx := context.Background()
	bl, size := sameSizeBlocks(t, 10)
	s, _ := openStore(t, Config{Dir: t.TempDir(), QuotaBytes: 5 * size})
	for _, b := range bl[:5] {
		mustPut(t, s, b)
	}
	if s.Stats().Blocks != 5 {
		t.Fatalf("%d blocks, want 5", s.Stats().Blocks)
	}
	checkGet(t, s, bl[0]) // 0 is now the most recently used; 1 the least
	mustPut(t, s, bl[5])
	mustPut(t, s, bl[6])
	if s.Has(bl[1].key) || s.Has(bl[2].key) || !s.Has(bl[0].key) || !s.Has(bl[5].key) || !s.Has(bl[6].key) {
		t.Fatalf("wrong blocks evicted: has %v", hasAll(s, bl[:7]))
	}
	st := s.Stats()
	if st.Bytes > st.QuotaBytes || st.Evicted != 2 {
		t.Fatalf("stats %+v", st)
	}
	// A snapshot's blocks are spared, however old.
	if err := s.SaveSnapshot(ctx, Snapshot{Name: "keep", Blocks: []SnapshotBlock{{bl[3].key, 16}}}); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, bl[7])
	mustPut(t, s, bl[8])
	if !s.Has(bl[3].key) {
		t.Fatal("GC removed a snapshot's block")
	}
	if s.Has(bl[4].key) || s.Has(bl[0].key) {
		t.Fatalf("unreferenced old blocks kept: %v", hasAll(s, bl[:9]))
	}
	if err := s.Remove(bl[3].key); !errors.Is(err, ErrReferenced) {
		t.Fatalf("Remove of a referenced block: %v", err)
	}
	if st := s.Stats(); st.Bytes > st.QuotaBytes {
		t.Fatalf("over quota: %+v", st)
	}
	// Deleting the snapshot frees the block for GC.
	if err := s.DeleteSnapshot(ctx, "keep"); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, bl[9])
	if s.Has(bl[3].key) {
		t.Fatal("block of a deleted snapshot not collected")
	}
}

func hasAll(s *Store, bl []testBlock) []bool {
	out := make([]bool, len(bl))
	for i, b := range bl {
		out[i] = s.Has(b.key)
	}
	return out
}

func TestGCAllReferenced(t *testing.T) {
	ctx := context.Background()
	bl, size := sameSizeBlocks(t, 4)
	s, _ := openStore(t, Config{Dir: t.TempDir(), QuotaBytes: 2 * size})
	mustPut(t, s, bl[0])
	mustPut(t, s, bl[1])
	if err := s.SaveSnapshot(ctx, Snapshot{Name: "all", Blocks: []SnapshotBlock{{bl[0].key, 1}, {bl[1].key, 1}}}); err != nil {
		t.Fatal(err)
	}
	// Over the quota (the snapshot file counts too), nothing collectable.
	removed, _, err := s.GC(ctx)
	if err != nil || removed != 0 {
		t.Fatalf("GC: %d, %v", removed, err)
	}
	if !s.Has(bl[0].key) || !s.Has(bl[1].key) {
		t.Fatal("referenced blocks removed")
	}
	// A new block is written, then is itself the only candidate.
	mustPut(t, s, bl[2])
	if s.Has(bl[2].key) {
		t.Fatal("unreferenced block kept above the quota")
	}
	if _, err := s.LoadSnapshot(ctx, "all"); err != nil {
		t.Fatal(err)
	}
}

func TestGCOrderSurvivesRestart(t *testing.T) {
	bl, size := sameSizeBlocks(t, 4)
	dir := t.TempDir()
	s, _ := openStore(t, Config{Dir: dir})
	for _, b := range bl {
		mustPut(t, s, b)
		time.Sleep(15 * time.Millisecond) // file mtimes may tick coarsely (jiffies)
	}
	checkGet(t, s, bl[0]) // touches the file: 1 is now the least recently used
	s.Close()
	s2, _ := openStore(t, Config{Dir: dir, QuotaBytes: 3 * size}) // Open collects
	if s2.Has(bl[1].key) || !s2.Has(bl[0].key) || !s2.Has(bl[2].key) || !s2.Has(bl[3].key) {
		t.Fatalf("after reopen with quota: %v", hasAll(s2, bl))
	}
	// Explicit GC with nothing to do.
	if n, freed, err := s2.GC(context.Background()); n != 0 || freed != 0 || err != nil {
		t.Fatalf("GC: %d %d %v", n, freed, err)
	}
}

func TestGCSparesPinnedBlocks(t *testing.T) {
	bl, size := sameSizeBlocks(t, 6)
	s, _ := openStore(t, Config{Dir: t.TempDir(), QuotaBytes: 3 * size})
	s.Pin(bl[0].key) // pinned before it is written
	for _, b := range bl[:3] {
		mustPut(t, s, b)
	}
	mustPut(t, s, bl[3])
	mustPut(t, s, bl[4])
	if !s.Has(bl[0].key) || s.Has(bl[1].key) {
		t.Fatalf("pinned block collected or the wrong one kept: %v", hasAll(s, bl[:5]))
	}
	checkGet(t, s, bl[0])
	s.Unpin(bl[0].key)
	s.Unpin(bl[0].key) // an extra Unpin is harmless
	mustPut(t, s, bl[5])
	mustPut(t, s, bl[1])
	if s.Has(bl[0].key) && s.Has(bl[2].key) {
		t.Fatalf("unpinned blocks never collected: %v", hasAll(s, bl))
	}
}
