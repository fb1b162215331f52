package coldstore

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// damage rewrites a file in place.
func damage(t *testing.T, path string, f func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, f(b), 0o600); err != nil {
		t.Fatal(err)
	}
}

func flipAt(off int) func([]byte) []byte {
	return func(b []byte) []byte {
		if off < 0 {
			off += len(b)
		}
		b[off] ^= 0x40
		return b
	}
}

func TestCorruptionAtOpenGetVerify(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, _ := openStore(t, Config{Dir: dir})
	var bl []testBlock
	for i := range 8 {
		b := makeBlock(i, 40000+i)
		mustPut(t, s, b)
		bl = append(bl, b)
	}
	snap := Snapshot{Name: "sess-1", Compat: testCompat, Manifest: []byte("m"), Meta: []byte("meta"),
		Blocks: []SnapshotBlock{{bl[5].key, 16}, {bl[2].key, 16}}}
	if err := s.SaveSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	snap.Name = "sess-2"
	snap.Blocks = snap.Blocks[:1]
	if err := s.SaveSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	s.Close()

	path := func(b testBlock) string { return s.blockPath(b.key) }
	damage(t, path(bl[0]), flipAt(40)) // header byte: caught at Open
	damage(t, path(bl[1]), flipAt(-1)) // payload byte: caught by Get
	damage(t, path(bl[2]), func(b []byte) []byte { return b[:len(b)/2] })
	damage(t, path(bl[3]), func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], FormatVersion+1); return b })
	damage(t, path(bl[4]), func(b []byte) []byte { copy(b, "NOTOURS!"); return b })
	damage(t, path(bl[7]), func(b []byte) []byte { return b[:5] })
	damage(t, filepath.Join(dir, "snapshots", "sess-2.snap"), flipAt(-2))
	// A block file under another key's name.
	other := makeBlock(100, 10)
	misnamed := s.blockPath(other.key)
	os.MkdirAll(filepath.Dir(misnamed), 0o700)
	raw, _ := os.ReadFile(path(bl[6]))
	os.WriteFile(misnamed, raw, 0o600)
	// Strays and leftovers.
	os.WriteFile(filepath.Join(dir, "blocks", "notes.txt"), []byte("hi"), 0o600)
	os.WriteFile(filepath.Join(filepath.Dir(path(bl[6])), ".x.blk.123.tmp"), []byte("partial"), 0o600)
	os.WriteFile(filepath.Join(dir, "snapshots", ".sess-3.snap.9.tmp"), []byte("partial"), 0o600)
	os.WriteFile(filepath.Join(dir, "snapshots", "bad name!.snap"), []byte("x"), 0o600)

	s2, rep := openStore(t, Config{Dir: dir})
	kinds := map[string]string{}
	for _, p := range rep.SetAside {
		if p.MovedTo == "" {
			t.Fatalf("problem not moved: %v", p)
		}
		if _, err := os.Stat(p.Path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s still in place", p.Path)
		}
		kinds[filepath.Base(p.Path)] = p.Kind
	}
	want := map[string]string{
		filepath.Base(path(bl[0])): KindChecksum,
		filepath.Base(path(bl[2])): KindTruncated,
		filepath.Base(path(bl[3])): KindVersion,
		filepath.Base(path(bl[4])): KindForeign,
		filepath.Base(path(bl[7])): KindTruncated,
		filepath.Base(misnamed):    KindMisnamed,
		"notes.txt":                KindForeign,
		"sess-2.snap":              KindChecksum,
		"bad name!.snap":           KindForeign,
	}
	for name, kind := range want {
		if kinds[name] != kind {
			t.Errorf("%s: kind %q, want %q (report %v)", name, kinds[name], kind, rep.SetAside)
		}
	}
	if len(rep.SetAside) != len(want) {
		t.Errorf("set aside %d files, want %d: %v", len(rep.SetAside), len(want), rep.SetAside)
	}
	for _, p := range rep.SetAside {
		if p.Kind == KindVersion && !errors.Is(p.Err, ErrVersion) || p.Kind != KindVersion && !errors.Is(p.Err, ErrCorrupt) {
			t.Errorf("problem error class: %v", p)
		}
	}
	if rep.TempRemoved != 2 {
		t.Errorf("temp removed %d, want 2", rep.TempRemoved)
	}
	if got := len(quarantined(t, dir)); got != len(want) {
		t.Errorf("quarantine holds %d files, want %d", got, len(want))
	}
	// Blocks 1 (payload damage, not seen by Open), 5 and 6 are indexed.
	if rep.Blocks != 3 || rep.Snapshots != 1 {
		t.Fatalf("report %d blocks %d snapshots, want 3 and 1", rep.Blocks, rep.Snapshots)
	}
	if len(rep.Missing) != 1 || !errors.Is(rep.Missing[0].Err, ErrMissingBlock) || rep.Missing[0].Kind != KindMissingBlock {
		t.Fatalf("missing report %v", rep.Missing)
	}
	checkGet(t, s2, bl[5])
	checkGet(t, s2, bl[6])
	for _, b := range []testBlock{bl[0], bl[2], bl[3], bl[4]} {
		if _, _, err := s2.Get(ctx, b.key); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get of a set-aside block: %v", err)
		}
	}
	// The payload flip is caught by Get, which sets the file aside.
	n := len(quarantined(t, dir))
	if _, _, err := s2.Get(ctx, bl[1].key); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get of a damaged payload: %v", err)
	}
	if s2.Has(bl[1].key) || len(quarantined(t, dir)) != n+1 {
		t.Fatal("damaged block not set aside by Get")
	}
	if _, _, err := s2.Get(ctx, bl[1].key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Get: %v", err)
	}
	// The snapshot with a missing block.
	got, err := s2.LoadSnapshot(ctx, "sess-1")
	if !errors.Is(err, ErrMissingBlock) || got.Name != "sess-1" {
		t.Fatalf("LoadSnapshot: %v", err)
	}
	if _, err := s2.LoadSnapshot(ctx, "sess-2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("LoadSnapshot of a set-aside snapshot: %v", err)
	}

	// Damage after Open: Verify finds it, sets it aside, and lists the
	// snapshot's missing block.
	damage(t, path(bl[6]), flipAt(-100))
	problems, err := s2.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !hasKind(problems, KindChecksum) || !hasKind(problems, KindMissingBlock) || len(problems) != 2 {
		t.Fatalf("Verify: %v", problems)
	}
	if s2.Has(bl[6].key) {
		t.Fatal("Verify left a corrupt block indexed")
	}
	checkGet(t, s2, bl[5])
	if st := s2.Stats(); st.SetAside != int64(len(want))+2 {
		t.Fatalf("stats set aside %d, want %d", st.SetAside, len(want)+2)
	}
	// A clean store verifies clean.
	if err := s2.DeleteSnapshot(ctx, "sess-1"); err != nil {
		t.Fatal(err)
	}
	if problems, err := s2.Verify(ctx); err != nil || len(problems) != 0 {
		t.Fatalf("Verify of a clean store: %v %v", problems, err)
	}
}

func TestVerifyOnOpenReadsPayloads(t *testing.T) {
	dir := t.TempDir()
	s, _ := openStore(t, Config{Dir: dir})
	b := makeBlock(1, 30000)
	mustPut(t, s, b)
	s.Close()
	damage(t, s.blockPath(b.key), flipAt(-3))
	s2, rep := openStore(t, Config{Dir: dir, VerifyOnOpen: true})
	if len(rep.SetAside) != 1 || rep.SetAside[0].Kind != KindChecksum || s2.Has(b.key) {
		t.Fatalf("report %v", rep.SetAside)
	}
}

func TestCorruptSnapshotOnLoad(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, _ := openStore(t, Config{Dir: dir})
	b := makeBlock(1, 3000)
	mustPut(t, s, b)
	if err := s.SaveSnapshot(ctx, Snapshot{Name: "a", Manifest: []byte(strings.Repeat("m", 100)), Blocks: []SnapshotBlock{{b.key, 3}}}); err != nil {
		t.Fatal(err)
	}
	damage(t, filepath.Join(dir, "snapshots", "a.snap"), flipAt(-1)) // payload (manifest)
	if _, err := s.LoadSnapshot(ctx, "a"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("LoadSnapshot: %v", err)
	}
	if infos, _ := s.Snapshots(ctx); len(infos) != 0 {
		t.Fatalf("corrupt snapshot still listed: %v", infos)
	}
	if len(quarantined(t, dir)) != 1 {
		t.Fatal("snapshot not set aside")
	}
	// Its block is no longer referenced.
	if err := s.Remove(b.key); err != nil {
		t.Fatal(err)
	}
}
