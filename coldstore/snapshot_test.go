package coldstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSnapshotLifecycle(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, _ := openStore(t, Config{Dir: dir})
	var bl []testBlock
	for i := range 4 {
		b := makeBlock(i, 10000)
		mustPut(t, s, b)
		bl = append(bl, b)
	}
	created := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	snap := Snapshot{
		Name: "agent-1_main.v2", Created: created, Compat: testCompat,
		Manifest: []byte(`{"segments":[]}`), Meta: []byte{0, 1, 2},
		Blocks: []SnapshotBlock{{bl[0].key, 64}, {bl[1].key, 64}, {bl[2].key, 10}},
	}
	if err := s.SaveSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store, want Snapshot) {
		t.Helper()
		got, err := s.LoadSnapshot(ctx, want.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != want.Name || !got.Created.Equal(want.Created) || got.Compat != want.Compat ||
			!bytes.Equal(got.Manifest, want.Manifest) || !bytes.Equal(got.Meta, want.Meta) || len(got.Blocks) != len(want.Blocks) {
			t.Fatalf("loaded %+v, want %+v", got, want)
		}
		for i := range got.Blocks {
			if got.Blocks[i] != want.Blocks[i] {
				t.Fatalf("block %d: %v, want %v", i, got.Blocks[i], want.Blocks[i])
			}
		}
	}
	check(s, snap)
	infos, err := s.Snapshots(ctx)
	if err != nil || len(infos) != 1 {
		t.Fatalf("Snapshots: %v %v", infos, err)
	}
	if in := infos[0]; in.Name != snap.Name || in.Tokens != 138 || in.Blocks != 3 || in.Bytes <= 0 || in.Compat != testCompat || !in.Created.Equal(created) {
		t.Fatalf("info %+v", in)
	}
	// Replace atomically under the same name.
	snap2 := snap
	snap2.Blocks = []SnapshotBlock{{bl[3].key, 5}}
	snap2.Manifest = nil
	snap2.Created = time.Time{} // set to now
	if err := s.SaveSnapshot(ctx, snap2); err != nil {
		t.Fatal(err)
	}
	got, err := s.LoadSnapshot(ctx, snap.Name)
	if err != nil || len(got.Blocks) != 1 || got.Blocks[0].Key != bl[3].key || time.Since(got.Created) > time.Minute {
		t.Fatalf("replaced snapshot: %+v %v", got, err)
	}
	// The old snapshot's blocks are no longer referenced; the new one's is.
	if err := s.Remove(bl[0].key); err != nil {
		t.Fatalf("Remove of a no longer referenced block: %v", err)
	}
	if err := s.Remove(bl[3].key); !errors.Is(err, ErrReferenced) {
		t.Fatalf("Remove of a referenced block: %v", err)
	}
	// A second snapshot; survives reopen.
	snap3 := Snapshot{Name: "b", Created: created.Add(time.Hour), Blocks: []SnapshotBlock{{bl[1].key, 1}, {bl[1].key, 1}}}
	if err := s.SaveSnapshot(ctx, snap3); err != nil {
		t.Fatal(err)
	}
	bytesBefore := s.Stats().Bytes
	s.Close()
	s2, rep := openStore(t, Config{Dir: dir})
	if rep.Snapshots != 2 || len(rep.Missing) != 0 || rep.Bytes != bytesBefore {
		t.Fatalf("reopen report %+v (bytes before %d)", rep, bytesBefore)
	}
	check(s2, snap3)
	infos, _ = s2.Snapshots(ctx)
	if len(infos) != 2 || infos[0].Name != "b" || infos[1].Name != snap.Name {
		t.Fatalf("listing order: %v", infos)
	}
	// Block named twice is referenced twice, released fully on delete.
	if err := s2.DeleteSnapshot(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := s2.Remove(bl[1].key); err != nil {
		t.Fatalf("Remove after DeleteSnapshot: %v", err)
	}
	if err := s2.DeleteSnapshot(ctx, "b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := s2.LoadSnapshot(ctx, "b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("load deleted: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "snapshots", "b.snap")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("snapshot file left")
	}
}

func TestSnapshotMissingBlocksAndNames(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, Config{Dir: t.TempDir()})
	b := makeBlock(1, 1000)
	mustPut(t, s, b)
	missing := makeBlock(2, 1000)
	err := s.SaveSnapshot(ctx, Snapshot{Name: "x", Blocks: []SnapshotBlock{{b.key, 1}, {missing.key, 1}}})
	if !errors.Is(err, ErrMissingBlock) || !strings.Contains(err.Error(), missing.key.String()) {
		t.Fatalf("SaveSnapshot with a missing block: %v", err)
	}
	if infos, _ := s.Snapshots(ctx); len(infos) != 0 {
		t.Fatal("failed save left a snapshot")
	}
	// A block that is only queued is not stored yet.
	gate := make(chan struct{})
	var entered atomicCounter
	gateWrites(s, gate, &entered.n)
	if err := s.Enqueue(missing.key, missing.meta, missing.blob); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveSnapshot(ctx, Snapshot{Name: "x", Blocks: []SnapshotBlock{{missing.key, 1}}}); !errors.Is(err, ErrMissingBlock) {
		t.Fatalf("snapshot of a queued block: %v", err)
	}
	close(gate)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveSnapshot(ctx, Snapshot{Name: "x", Blocks: []SnapshotBlock{{missing.key, 1}}}); err != nil {
		t.Fatalf("snapshot after Flush: %v", err)
	}
	// A block file that vanished behind the store's back.
	os.Remove(s.blockPath(missing.key))
	if _, err := s.LoadSnapshot(ctx, "x"); !errors.Is(err, ErrMissingBlock) {
		t.Fatalf("LoadSnapshot with a vanished block file: %v", err)
	}
	for _, name := range []string{"", ".", "..", "a/b", "a b", "ä", strings.Repeat("a", 129), "x\x00"} {
		if err := s.SaveSnapshot(ctx, Snapshot{Name: name}); !errors.Is(err, ErrInvalidName) {
			t.Fatalf("SaveSnapshot(%q): %v", name, err)
		}
		if _, err := s.LoadSnapshot(ctx, name); !errors.Is(err, ErrInvalidName) {
			t.Fatalf("LoadSnapshot(%q): %v", name, err)
		}
		if err := s.DeleteSnapshot(ctx, name); !errors.Is(err, ErrInvalidName) {
			t.Fatalf("DeleteSnapshot(%q): %v", name, err)
		}
	}
	if err := s.SaveSnapshot(ctx, Snapshot{Name: strings.Repeat("a", 128)}); err != nil {
		t.Fatalf("128-byte name: %v", err)
	}
	if err := s.SaveSnapshot(ctx, Snapshot{Name: "neg", Blocks: []SnapshotBlock{{b.key, -1}}}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("negative tokens: %v", err)
	}
}
