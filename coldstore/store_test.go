package coldstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPutGetRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s, rep := openStore(t, Config{Dir: dir})
	if rep.Blocks != 0 || len(rep.SetAside) != 0 {
		t.Fatalf("fresh report %+v", rep)
	}
	ctx := context.Background()
	var all []testBlock
	for i, tc := range []struct {
		elem int
		blob []byte
	}{
		{1, randomBytes(1001, 1)},
		{1, kvLikeF16(3<<20+1, 2)}, // quantized-like: no split, several chunks
		{2, kvLikeF16(4097, 3)},    // odd length
		{2, kvLikeF16(1<<20, 4)},
		{2, kvLikeF16(1, 5)},
		{4, kvLikeF32(4099, 6)},
		{4, kvLikeF32(600003, 7)},
		{8, randomBytes(77, 8)},
		{2, nil}, // empty
	} {
		b := makeBlock(i, 0)
		b.meta.ElemBytes = tc.elem
		b.blob = tc.blob
		mustPut(t, s, b)
		if !s.Has(b.key) {
			t.Fatalf("block %d: Has false after Put", i)
		}
		checkGet(t, s, b)
		all = append(all, b)
	}
	// Put of a stored key is a no-op.
	st := s.Stats()
	mustPut(t, s, all[0])
	if s.Stats().Written != st.Written {
		t.Fatal("second Put wrote again")
	}
	if st.Blocks != len(all) || st.RawBytes == 0 || st.Bytes == 0 || st.Written != int64(len(all)) {
		t.Fatalf("stats %+v", st)
	}
	// File modes and layout.
	for _, b := range all {
		p := filepath.Join(dir, "blocks", b.key.String()[:2], b.key.String()+".blk")
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s mode %v", p, fi.Mode())
		}
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v", fi.Mode())
	}
	// Reopen: the index is rebuilt from the files.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, rep2 := openStore(t, Config{Dir: dir})
	if rep2.Blocks != len(all) || rep2.Bytes != st.Bytes || len(rep2.SetAside) != 0 {
		t.Fatalf("reopen report %+v, want %d blocks %d bytes", rep2, len(all), st.Bytes)
	}
	for _, b := range all {
		checkGet(t, s2, b)
	}
	if got := s2.Stats().RawBytes; got != st.RawBytes {
		t.Fatalf("raw bytes after reopen %d, want %d", got, st.RawBytes)
	}
	if _, _, err := s2.Get(ctx, makeBlock(999, 10).key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get unknown: %v", err)
	}
}

func TestBadArguments(t *testing.T) {
	s, _ := openStore(t, Config{Dir: t.TempDir()})
	b := makeBlock(1, 100)
	for name, m := range map[string]func(*BlockMeta){
		"elem3":   func(m *BlockMeta) { m.ElemBytes = 3 },
		"elem0":   func(m *BlockMeta) { m.ElemBytes = 0 },
		"pos":     func(m *BlockMeta) { m.Pos0 = -1 },
		"segment": func(m *BlockMeta) { m.Segment = strings.Repeat("x", maxSegmentLen+1) },
	} {
		meta := b.meta
		m(&meta)
		if err := s.Put(context.Background(), b.key, meta, b.blob); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("Put %s: %v", name, err)
		}
		if err := s.Enqueue(b.key, meta, b.blob); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("Enqueue %s: %v", name, err)
		}
	}
	if s.Stats().Blocks != 0 {
		t.Fatal("a bad Put stored something")
	}
	if _, _, err := Open(context.Background(), Config{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Open without Dir: %v", err)
	}
}

func TestLockedFolder(t *testing.T) {
	dir := t.TempDir()
	s, _ := openStore(t, Config{Dir: dir})
	if _, _, err := Open(context.Background(), Config{Dir: dir}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v", err)
	}
	s.Close()
	s2, _ := openStore(t, Config{Dir: dir})
	s2.Close()
}

func TestRemoveAndClosed(t *testing.T) {
	s, _ := openStore(t, Config{Dir: t.TempDir()})
	ctx := context.Background()
	b := makeBlock(1, 5000)
	mustPut(t, s, b)
	if err := s.Remove(b.key); err != nil {
		t.Fatal(err)
	}
	if s.Has(b.key) || s.Stats().Bytes != 0 {
		t.Fatalf("after Remove: has %v, bytes %d", s.Has(b.key), s.Stats().Bytes)
	}
	if _, err := os.Stat(s.blockPath(b.key)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file still there: %v", err)
	}
	if err := s.Remove(b.key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Remove: %v", err)
	}
	mustPut(t, s, b)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := s.Get(ctx, b.key); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	if err := s.Put(ctx, b.key, b.meta, b.blob); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put after Close: %v", err)
	}
	if err := s.Enqueue(b.key, b.meta, b.blob); !errors.Is(err, ErrClosed) {
		t.Fatalf("Enqueue after Close: %v", err)
	}
	if err := s.Remove(b.key); !errors.Is(err, ErrClosed) {
		t.Fatalf("Remove after Close: %v", err)
	}
	if err := s.SaveSnapshot(ctx, Snapshot{Name: "x"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("SaveSnapshot after Close: %v", err)
	}
	if _, err := s.Verify(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Verify after Close: %v", err)
	}
}

func TestGetReturnsOwnBuffer(t *testing.T) {
	s, _ := openStore(t, Config{Dir: t.TempDir()})
	b := makeBlock(3, 1<<19)
	mustPut(t, s, b)
	_, x, _ := s.Get(context.Background(), b.key)
	x[0] ^= 0xff
	_, y, _ := s.Get(context.Background(), b.key)
	if !bytes.Equal(y, b.blob) {
		t.Fatal("modifying one Get's result changed the next")
	}
}

func TestGetInto(t *testing.T) {
	s, _ := openStore(t, Config{Dir: t.TempDir()})
	b := makeBlock(4, 70001)
	mustPut(t, s, b)
	buf := make([]byte, 10, 80000)
	_, blob, err := s.GetInto(context.Background(), b.key, buf)
	if err != nil || !bytes.Equal(blob, b.blob) {
		t.Fatalf("GetInto: %v", err)
	}
	if &blob[0] != &buf[:1][0] {
		t.Fatal("GetInto did not use the buffer it was given")
	}
	_, blob, err = s.GetInto(context.Background(), b.key, make([]byte, 0, 10))
	if err != nil || !bytes.Equal(blob, b.blob) {
		t.Fatalf("GetInto with a small buffer: %v", err)
	}
}

// TestConcurrentUse runs writers, readers, snapshots and GC at once
// (meant for -race) and checks the store is consistent afterwards.
func TestConcurrentUse(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, _ := openStore(t, Config{Dir: dir, Workers: 2, QueueBlocks: 8, QuotaBytes: 400 << 10})
	deadline := time.Now().Add(400 * time.Millisecond)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				b := makeBlock(w*100000+i, 5000+i%7*1000)
				switch i % 4 {
				case 0:
					if err := s.Put(ctx, b.key, b.meta, b.blob); err != nil {
						errs <- err
						return
					}
				case 1:
					if err := s.Enqueue(b.key, b.meta, b.blob); err != nil && !errors.Is(err, ErrQueueFull) {
						errs <- err
						return
					}
				case 2:
					prev := makeBlock(w*100000+i-2, 0)
					if err := s.SaveSnapshot(ctx, Snapshot{Name: fmt.Sprintf("w%d-%d", w, i%3), Blocks: []SnapshotBlock{{prev.key, 1}}}); err != nil && !errors.Is(err, ErrMissingBlock) {
						errs <- err
						return
					}
				case 3:
					old := makeBlock(w*100000+i/2, 5000+(i/2)%7*1000)
					if _, blob, err := s.Get(ctx, old.key); err == nil {
						if !bytes.Equal(blob, old.blob) {
							errs <- fmt.Errorf("block %d read back wrong", i/2)
							return
						}
					} else if !errors.Is(err, ErrNotFound) {
						errs <- err
						return
					}
					s.Stats()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if problems, err := s.Verify(ctx); err != nil || len(problems) != 0 {
		t.Fatalf("Verify: %v %v", problems, err)
	}
	infos, _ := s.Snapshots(ctx)
	for _, in := range infos {
		if _, err := s.LoadSnapshot(ctx, in.Name); err != nil {
			t.Fatalf("snapshot %s: %v", in.Name, err)
		}
	}
	st := s.Stats()
	s.Close()
	_, rep := openStore(t, Config{Dir: dir, QuotaBytes: 400 << 10})
	if rep.Blocks != st.Blocks || rep.Bytes != st.Bytes || rep.Snapshots != st.Snapshots {
		t.Fatalf("reopen %+v vs stats %+v", rep, st)
	}
	t.Logf("%d written, %d evicted, %d blocks, %d snapshots", st.Written, st.Evicted, st.Blocks, st.Snapshots)
}
