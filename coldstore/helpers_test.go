package coldstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

var testCompat = Compat{ModelDigest: "0123abcd", KVType: "f16", FlashAttention: true, Settings: "ctx=4096"}

// testBlock is a deterministic block derived from i alone: its chain,
// key, metadata and f16-like KV bytes of size bytes.
type testBlock struct {
	key  Key
	meta BlockMeta
	blob []byte
}

func makeBlock(i int, size int) testBlock {
	chain := sha256.Sum256(binary.LittleEndian.AppendUint64(nil, uint64(i)))
	key := BlockKey(testCompat, chain)
	return blockForKey(key, chain, size)
}

// blockForKey derives metadata and content from the key, so a reader can
// check a block it did not write.
func blockForKey(key Key, chain [32]byte, size int) testBlock {
	seed := binary.LittleEndian.Uint64(key[:8])
	toks := make([]int32, 16+int(key[8]%16))
	for j := range toks {
		toks[j] = int32(seed>>uint(j%32)) & 0xfff
	}
	return testBlock{
		key: key,
		meta: BlockMeta{
			Chain: chain, Tokens: toks, Pos0: int(key[9]) * 64, ElemBytes: 2,
			Class: key[10] % 3, Segment: "seg-" + key.String()[:6],
		},
		blob: kvLikeF16(size, seed),
	}
}

func openStore(t testing.TB, cfg Config) (*Store, OpenReport) {
	t.Helper()
	s, rep, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, rep
}

func mustPut(t testing.TB, s *Store, b testBlock) {
	t.Helper()
	if err := s.Put(context.Background(), b.key, b.meta, b.blob); err != nil {
		t.Fatal(err)
	}
}

// checkGet asserts Get returns exactly b.
func checkGet(t testing.TB, s *Store, b testBlock) {
	t.Helper()
	meta, blob, err := s.Get(context.Background(), b.key)
	if err != nil {
		t.Fatalf("Get %s: %v", b.key, err)
	}
	if !bytes.Equal(blob, b.blob) {
		t.Fatalf("Get %s: blob differs (%d vs %d bytes)", b.key, len(blob), len(b.blob))
	}
	if !metaEqual(meta, b.meta) {
		t.Fatalf("Get %s: meta %+v, want %+v", b.key, meta, b.meta)
	}
}

func metaEqual(a, b BlockMeta) bool {
	if a.Chain != b.Chain || a.Pos0 != b.Pos0 || a.ElemBytes != b.ElemBytes || a.Class != b.Class ||
		a.Segment != b.Segment || len(a.Tokens) != len(b.Tokens) {
		return false
	}
	for i := range a.Tokens {
		if a.Tokens[i] != b.Tokens[i] {
			return false
		}
	}
	return true
}

// quarantined lists the files in dir/quarantine.
func quarantined(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "quarantine"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func hasKind(ps []Problem, kind string) bool {
	for _, p := range ps {
		if p.Kind == kind {
			return true
		}
	}
	return false
}

// waitFor polls cond for up to 5 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func isErr(err, target error) bool { return errors.Is(err, target) }

type atomicCounter struct{ n atomic.Int64 }

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
