package coldstore

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// setOps installs file operations derived from the real ones.
func setOps(s *Store, mod func(o *fileOps)) {
	o := realFileOps()
	mod(o)
	s.ops.Store(o)
}

// gateWrites makes every block write wait for gate; entered counts
// writes that reached the gate.
func gateWrites(s *Store, gate <-chan struct{}, entered *atomic.Int64) {
	setOps(s, func(o *fileOps) {
		w := o.write
		o.write = func(f *os.File, p []byte) (int, error) {
			if strings.HasSuffix(f.Name(), tmpSuffix) && strings.Contains(f.Name(), blockExt) {
				entered.Add(1)
				<-gate
			}
			return w(f, p)
		}
	})
}

func TestEnqueueFlush(t *testing.T) {
	dir := t.TempDir()
	s, _ := openStore(t, Config{Dir: dir, Workers: 2})
	ctx := context.Background()
	var bl []testBlock
	for i := range 20 {
		b := makeBlock(i, 20000+i*1000)
		bl = append(bl, b)
		if err := s.Enqueue(b.key, b.meta, b.blob); err != nil {
			t.Fatal(err)
		}
		if err := s.Enqueue(b.key, b.meta, b.blob); err != nil { // duplicate: no-op
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, b := range bl {
		if !s.Has(b.key) {
			t.Fatalf("%s not stored after Flush", b.key)
		}
		checkGet(t, s, b)
	}
	st := s.Stats()
	if st.Written != 20 || st.Queued != 0 || st.Failed != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Enqueue of a stored block is a no-op.
	if err := s.Enqueue(bl[0].key, bl[0].meta, bl[0].blob); err != nil || s.Stats().Queued != 0 {
		t.Fatalf("re-enqueue: %v, queued %d", err, s.Stats().Queued)
	}
}

func TestQueueFull(t *testing.T) {
	s, _ := openStore(t, Config{Dir: t.TempDir(), Workers: 1, QueueBlocks: 2})
	gate := make(chan struct{})
	var entered atomic.Int64
	gateWrites(s, gate, &entered)
	bl := []testBlock{makeBlock(0, 1000), makeBlock(1, 1000), makeBlock(2, 1000), makeBlock(3, 1000)}
	if err := s.Enqueue(bl[0].key, bl[0].meta, bl[0].blob); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the worker to take the first block", func() bool { return entered.Load() == 1 })
	for _, b := range bl[1:3] {
		if err := s.Enqueue(b.key, b.meta, b.blob); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	err := s.Enqueue(bl[3].key, bl[3].meta, bl[3].blob)
	if !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Enqueue into a full queue: %v", err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("Enqueue blocked for %v", d)
	}
	if st := s.Stats(); st.Queued != 3 || st.Refused != 1 {
		t.Fatalf("stats %+v", st)
	}
	// Flush waits; with a deadline it gives up without losing anything.
	fctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := s.Flush(fctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush with deadline: %v", err)
	}
	close(gate)
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, b := range bl[:3] {
		checkGet(t, s, b)
	}
	if s.Has(bl[3].key) {
		t.Fatal("refused block stored")
	}
}

func TestFlushReportsFailures(t *testing.T) {
	s, _ := openStore(t, Config{Dir: t.TempDir(), Workers: 1})
	bad := makeBlock(1, 5000)
	good := makeBlock(2, 5000)
	boom := errors.New("boom")
	setOps(s, func(o *fileOps) {
		w := o.write
		o.write = func(f *os.File, p []byte) (int, error) {
			if strings.Contains(f.Name(), bad.key.String()) {
				return 0, boom
			}
			return w(f, p)
		}
	})
	for _, b := range []testBlock{bad, good} {
		if err := s.Enqueue(b.key, b.meta, b.blob); err != nil {
			t.Fatal(err)
		}
	}
	err := s.Flush(context.Background())
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), bad.key.String()) {
		t.Fatalf("Flush: %v", err)
	}
	if !s.Has(good.key) || s.Has(bad.key) {
		t.Fatal("wrong blocks stored")
	}
	if st := s.Stats(); st.Failed != 1 || st.Written != 1 || st.Unavailable != "" {
		t.Fatalf("stats %+v", st)
	}
	if s.Err() != nil {
		t.Fatalf("a non-disk error made the store stand aside: %v", s.Err())
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatalf("second Flush: %v (failures are reported once)", err)
	}
	// No temporary file is left behind.
	ents, _ := os.ReadDir(s.blocksDir)
	for _, d := range ents {
		files, _ := os.ReadDir(s.blocksDir + "/" + d.Name())
		for _, f := range files {
			if strings.HasSuffix(f.Name(), tmpSuffix) {
				t.Fatalf("temporary file left: %s", f.Name())
			}
		}
	}
}

func TestCloseDrains(t *testing.T) {
	dir := t.TempDir()
	s, _ := openStore(t, Config{Dir: dir, Workers: 1, QueueBlocks: 64})
	var bl []testBlock
	for i := range 30 {
		b := makeBlock(i, 30000)
		bl = append(bl, b)
		if err := s.Enqueue(b.key, b.meta, b.blob); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, rep := openStore(t, Config{Dir: dir})
	if rep.Blocks != len(bl) {
		t.Fatalf("after Close: %d blocks, want %d", rep.Blocks, len(bl))
	}
	for _, b := range bl {
		checkGet(t, s2, b)
	}
}

func TestCloseContextDeadline(t *testing.T) {
	s, _ := openStore(t, Config{Dir: t.TempDir(), Workers: 1})
	gate := make(chan struct{})
	var entered atomic.Int64
	gateWrites(s, gate, &entered)
	bl := []testBlock{makeBlock(0, 1000), makeBlock(1, 1000), makeBlock(2, 1000)}
	for _, b := range bl {
		if err := s.Enqueue(b.key, b.meta, b.blob); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the first write", func() bool { return entered.Load() == 1 })
	go func() { time.Sleep(80 * time.Millisecond); close(gate) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.CloseContext(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CloseContext: %v", err)
	}
	st := s.Stats()
	if st.Written != 1 || st.Failed != 2 {
		t.Fatalf("stats %+v: want the write in progress finished and the rest failed", st)
	}
	if err := s.Flush(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Flush after an interrupted Close: %v", err)
	}
}
