package coldstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// faultSwitch injects err into the chosen operation while on.
type faultSwitch struct {
	on    atomic.Bool
	err   error
	calls atomic.Int64 // calls of the faulty operation while on
}

func injectFault(s *Store, op string, fs *faultSwitch) {
	setOps(s, func(o *fileOps) {
		switch op {
		case "write":
			w := o.write
			o.write = func(f *os.File, p []byte) (int, error) {
				if fs.on.Load() {
					fs.calls.Add(1)
					return len(p) / 2, fs.err // a short write, as a full disk does
				}
				return w(f, p)
			}
		case "sync":
			sy := o.sync
			o.sync = func(f *os.File) error {
				if fs.on.Load() {
					fs.calls.Add(1)
					return fs.err
				}
				return sy(f)
			}
		case "rename":
			r := o.rename
			o.rename = func(a, b string) error {
				if fs.on.Load() {
					fs.calls.Add(1)
					return &os.LinkError{Op: "rename", Old: a, New: b, Err: fs.err}
				}
				return r(a, b)
			}
		case "syncDir":
			sd := o.syncDir
			o.syncDir = func(d string) error {
				if fs.on.Load() {
					fs.calls.Add(1)
					return fs.err
				}
				return sd(d)
			}
		}
	})
}

// fakeClock is a clock tests advance by hand.
type fakeClock struct{ offset atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *fakeClock) advance(d time.Duration) { c.offset.Add(int64(d)) }
func useFakeClock(s *Store) *fakeClock       { c := &fakeClock{}; s.clock = c.now; return c }

// tempFiles lists leftover temporary files under dir.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, tmpSuffix) {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func TestFaultStandsAsideAndRecovers(t *testing.T) {
	for _, tc := range []struct {
		op  string
		err error
	}{
		{"write", syscall.ENOSPC},
		{"sync", syscall.EIO},
		{"rename", syscall.ENOSPC},
		{"syncDir", syscall.EIO},
	} {
		t.Run(fmt.Sprintf("%s-%v", tc.op, tc.err), func(t *testing.T) {
			dir := t.TempDir()
			ctx := context.Background()
			retry := 30 * time.Second
			s, _ := openStore(t, Config{Dir: dir, RetryAfter: retry})
			clock := useFakeClock(s)
			old := makeBlock(0, 20000)
			mustPut(t, s, old)
			if err := s.SaveSnapshot(ctx, Snapshot{Name: "old", Blocks: []SnapshotBlock{{old.key, 16}}}); err != nil {
				t.Fatal(err)
			}
			fs := &faultSwitch{err: tc.err}
			fs.on.Store(true)
			injectFault(s, tc.op, fs)

			b1 := makeBlock(1, 20000)
			err := s.Put(ctx, b1.key, b1.meta, b1.blob)
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, tc.err) {
				t.Fatalf("Put on a faulty disk: %v", err)
			}
			if s.Has(b1.key) {
				t.Fatal("failed block indexed")
			}
			if left := tempFiles(t, dir); len(left) != 0 {
				t.Fatalf("temporary files left: %v", left)
			}
			if _, err := os.Stat(s.blockPath(b1.key)); !errors.Is(err, os.ErrNotExist) {
				t.Fatal("failed block file left in place")
			}
			if err := s.Err(); !errors.Is(err, ErrUnavailable) || !errors.Is(err, tc.err) {
				t.Fatalf("Err: %v", err)
			}
			st := s.Stats()
			if st.Failed != 1 || st.Unavailable == "" {
				t.Fatalf("stats %+v", st)
			}
			// Standing aside: no write reaches the disk.
			calls := fs.calls.Load()
			b2 := makeBlock(2, 20000)
			if err := s.Put(ctx, b2.key, b2.meta, b2.blob); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Put while standing aside: %v", err)
			}
			if err := s.Enqueue(b2.key, b2.meta, b2.blob); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Enqueue while standing aside: %v", err)
			}
			if err := s.SaveSnapshot(ctx, Snapshot{Name: "new", Blocks: []SnapshotBlock{{old.key, 16}}}); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("SaveSnapshot while standing aside: %v", err)
			}
			if fs.calls.Load() != calls {
				t.Fatal("a write reached the disk while standing aside")
			}
			// Reads keep working.
			checkGet(t, s, old)
			if _, err := s.LoadSnapshot(ctx, "old"); err != nil {
				t.Fatalf("LoadSnapshot while standing aside: %v", err)
			}
			// After the back-off the next write probes; still faulty: aside again.
			clock.advance(retry - time.Second)
			if s.Err() == nil {
				t.Fatal("back-off ended early")
			}
			clock.advance(2 * time.Second)
			if s.Err() != nil {
				t.Fatalf("Err after the back-off: %v", s.Err())
			}
			if err := s.Put(ctx, b2.key, b2.meta, b2.blob); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("probe on a still faulty disk: %v", err)
			}
			if fs.calls.Load() == calls {
				t.Fatal("no probe after the back-off")
			}
			if s.Err() == nil {
				t.Fatal("failed probe did not start a new back-off")
			}
			// Fixed disk: writes resume after the back-off.
			fs.on.Store(false)
			clock.advance(retry + time.Second)
			mustPut(t, s, b2)
			if s.Err() != nil || s.Stats().Unavailable != "" {
				t.Fatalf("not recovered: %v", s.Err())
			}
			checkGet(t, s, b2)
			if err := s.SaveSnapshot(ctx, Snapshot{Name: "new", Blocks: []SnapshotBlock{{b2.key, 16}}}); err != nil {
				t.Fatal(err)
			}
			if st := s.Stats(); st.Failed != 2 {
				t.Fatalf("failed %d, want 2 (the two attempted Puts)", st.Failed)
			}
		})
	}
}

func TestFaultFailsQueuedBlocks(t *testing.T) {
	s, _ := openStore(t, Config{Dir: t.TempDir(), Workers: 1, RetryAfter: time.Hour})
	gate := make(chan struct{})
	var entered atomic.Int64
	fs := &faultSwitch{err: syscall.ENOSPC}
	fs.on.Store(true)
	// Gate first so all three are queued before the first write fails.
	setOps(s, func(o *fileOps) {
		o.write = func(f *os.File, p []byte) (int, error) {
			entered.Add(1)
			<-gate
			fs.calls.Add(1)
			return 0, fs.err
		}
	})
	bl := []testBlock{makeBlock(0, 1000), makeBlock(1, 1000), makeBlock(2, 1000)}
	for _, b := range bl {
		if err := s.Enqueue(b.key, b.meta, b.blob); err != nil {
			t.Fatal(err)
		}
	}
	close(gate)
	err := s.Flush(context.Background())
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "2 more") {
		t.Fatalf("Flush: %v", err)
	}
	if st := s.Stats(); st.Failed != 3 || st.Written != 0 {
		t.Fatalf("stats %+v", st)
	}
	if fs.calls.Load() != 1 {
		t.Fatalf("%d writes attempted; after the first fault the rest should fail without touching the disk", fs.calls.Load())
	}
}

func TestFullDiskFreedByRemove(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, Config{Dir: t.TempDir(), RetryAfter: time.Hour})
	a := makeBlock(0, 5000)
	mustPut(t, s, a)
	fs := &faultSwitch{err: syscall.ENOSPC}
	fs.on.Store(true)
	injectFault(s, "write", fs)
	b := makeBlock(1, 5000)
	if err := s.Put(ctx, b.key, b.meta, b.blob); !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
	fs.on.Store(false)
	if err := s.Remove(a.key); err != nil {
		t.Fatal(err)
	}
	if s.Err() != nil {
		t.Fatalf("freeing space did not end the back-off: %v", s.Err())
	}
	mustPut(t, s, b)
	// EIO is not cured by freeing space.
	fs.err = syscall.EIO
	fs.on.Store(true)
	c := makeBlock(2, 5000)
	if err := s.Put(ctx, c.key, c.meta, c.blob); !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
	if err := s.Remove(b.key); err != nil {
		t.Fatal(err)
	}
	if s.Err() == nil {
		t.Fatal("removal ended an EIO back-off")
	}
}

// TestRealFullDisk runs the store on a 1 MiB tmpfs: a real ENOSPC.
func TestRealFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a 1 MiB tmpfs here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	ctx := context.Background()
	s, _, err := Open(ctx, Config{Dir: filepath.Join(mnt, "cold"), RetryAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var stored []testBlock
	var fullErr error
	for i := 0; i < 40; i++ {
		b := makeBlock(i, 0)
		b.blob = randomBytes(100<<10, uint64(i)) // incompressible: ~100 KiB per file
		b.meta.ElemBytes = 1
		if err := s.Put(ctx, b.key, b.meta, b.blob); err != nil {
			fullErr = err
			break
		}
		stored = append(stored, b)
	}
	if fullErr == nil {
		t.Fatal("1 MiB tmpfs never filled")
	}
	if !errors.Is(fullErr, ErrUnavailable) || !errors.Is(fullErr, syscall.ENOSPC) {
		t.Fatalf("error on a full disk: %v", fullErr)
	}
	if !errors.Is(s.Err(), ErrUnavailable) || s.Stats().Failed != 1 {
		t.Fatalf("Err %v, stats %+v", s.Err(), s.Stats())
	}
	if left := tempFiles(t, mnt); len(left) != 0 {
		t.Fatalf("temporary files left on the full disk: %v", left)
	}
	for _, b := range stored {
		checkGet(t, s, b)
	}
	extra := makeBlock(1000, 0)
	extra.blob = randomBytes(100<<10, 1000)
	extra.meta.ElemBytes = 1
	if err := s.Enqueue(extra.key, extra.meta, extra.blob); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Enqueue on a full disk: %v", err)
	}
	// Free space: the store retries at once and takes writes again.
	for _, b := range stored[:3] {
		if err := s.Remove(b.key); err != nil {
			t.Fatal(err)
		}
	}
	if s.Err() != nil {
		t.Fatalf("still standing aside after freeing space: %v", s.Err())
	}
	if err := s.Put(ctx, extra.key, extra.meta, extra.blob); err != nil {
		t.Fatalf("Put after freeing space: %v", err)
	}
	checkGet(t, s, extra)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopen on the (still nearly full) disk: everything written is there.
	s2, rep, err := Open(ctx, Config{Dir: filepath.Join(mnt, "cold")})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if len(rep.SetAside) != 0 || rep.Blocks != len(stored)-3+1 {
		t.Fatalf("reopen report %+v", rep)
	}
}
