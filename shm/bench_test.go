package shm

import (
	"os"
	"testing"
)

// The benchmark block: 256 tokens × 652 KV bytes per token (stories260K),
// 166,912 bytes of KV. b.SetBytes counts the KV bytes, so MB/s is KV
// throughput. Folders: the test's temp dir (disk-backed page cache) and,
// where it exists, /dev/shm (tmpfs, like $XDG_RUNTIME_DIR).
const benchTokens, benchBytesPerToken = 256, 652

func benchDirs(b *testing.B) map[string]string {
	dirs := map[string]string{"tmpdir": b.TempDir()}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "ctxd-shm-bench-"); err == nil {
			b.Cleanup(func() { os.RemoveAll(d) })
			dirs["devshm"] = d
		}
	}
	return dirs
}

func benchArena(b *testing.B, dir string) *Arena {
	a, _, err := Open(dir, Options{SlabBytes: 64 << 10, RegionBytes: 64 << 20, BudgetBytes: 256 << 20, Compat: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	return a
}

func BenchmarkPut(b *testing.B) {
	for name, dir := range benchDirs(b) {
		b.Run(name, func(b *testing.B) {
			a := benchArena(b, dir)
			blk := testBlock(1, benchTokens, benchTokens*benchBytesPerToken)
			// Warm: touch every slab once so page faults are not measured.
			for id := range uint64(1200) {
				blk.ID = id % 1000
				if err := a.Put(blk); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(len(blk.KV)))
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				blk.ID = uint64(i % 1000) // replacing Put: allocate, write, publish, free
				if err := a.Put(blk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReadKV cycles over 64 blocks (10.7 MB, more than the caches
// hold: memory bound) and, as "hot", rereads one block (cache resident).
func BenchmarkReadKV(b *testing.B) {
	dirs := benchDirs(b)
	dirs["hot"] = dirs["tmpdir"]
	for name, dir := range dirs {
		b.Run(name, func(b *testing.B) {
			a := benchArena(b, dir)
			nblocks := uint64(64)
			if name == "hot" {
				nblocks = 1
			}
			for id := range nblocks {
				if err := a.Put(testBlock(id, benchTokens, benchTokens*benchBytesPerToken)); err != nil {
					b.Fatal(err)
				}
			}
			buf := make([]byte, 0, benchTokens*benchBytesPerToken)
			b.SetBytes(benchTokens * benchBytesPerToken)
			b.ResetTimer()
			var err error
			for i := 0; b.Loop(); i++ {
				if buf, err = a.ReadKV(uint64(i)%nblocks, buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkViewKV(b *testing.B) {
	a := benchArena(b, b.TempDir())
	for id := range uint64(64) {
		if err := a.Put(testBlock(id, benchTokens, benchTokens*benchBytesPerToken)); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(benchTokens * benchBytesPerToken)
	for i := 0; b.Loop(); i++ {
		if err := a.ViewKV(uint64(i%64), func([][]byte) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkChainHash(b *testing.B) {
	toks := testBlock(1, benchTokens, 0).Tokens
	b.SetBytes(4 * benchTokens)
	var h Hash
	for b.Loop() {
		h = ChainHash(h, toks)
	}
}
