package shm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
)

// testBlock builds a deterministic block from its id: the same id always
// gives the same bytes, so a reader can verify a block without a copy.
func testBlock(id uint64, ntok, kvLen int) Block {
	rng := rand.New(rand.NewPCG(id, 0x5eed))
	b := Block{
		ID: id, Session: id % 7, Class: uint8(id % 3), Kind: uint8(id % 8),
		SegID: fmt.Sprintf("seg-%d", id%5), Pos: int32(id * 64), Tokens: make([]int32, ntok), KV: make([]byte, kvLen),
	}
	for i := range b.Tokens {
		b.Tokens[i] = int32(rng.Uint32())
	}
	for i := 0; i < len(b.KV); i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8 && i+j < len(b.KV); j++ {
			b.KV[i+j] = byte(v >> (8 * j))
		}
	}
	b.Chain = ChainHash(Hash{byte(id)}, b.Tokens)
	return b
}

// sizedBlock derives the sizes from the id too (1..maxKV bytes of KV).
func sizedBlock(id uint64, maxKV int) Block {
	rng := rand.New(rand.NewPCG(id, 1))
	return testBlock(id, rng.IntN(300), 1+rng.IntN(maxKV))
}

func sameBlock(a, b Block) error {
	switch {
	case a.ID != b.ID || a.Session != b.Session || a.Chain != b.Chain || a.Class != b.Class || a.Kind != b.Kind ||
		a.SegID != b.SegID || a.Pos != b.Pos:
		return fmt.Errorf("metadata differs: %+v vs %+v", meta(a), meta(b))
	case !slices.Equal(a.Tokens, b.Tokens):
		return fmt.Errorf("block %d: tokens differ", a.ID)
	case !bytes.Equal(a.KV, b.KV):
		return fmt.Errorf("block %d: KV differs (%d vs %d bytes)", a.ID, len(a.KV), len(b.KV))
	}
	return nil
}

func meta(b Block) string {
	return fmt.Sprintf("{id %d sess %d class %d kind %d seg %q pos %d ntok %d kv %d}",
		b.ID, b.Session, b.Class, b.Kind, b.SegID, b.Pos, len(b.Tokens), len(b.KV))
}

func mustOpen(t testing.TB, dir string, o Options) (*Arena, Report) {
	t.Helper()
	a, rep, err := Open(dir, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := a.Check(); err != nil {
		t.Fatalf("Check after Open: %v", err)
	}
	return a, rep
}

func mustCheck(t testing.TB, a *Arena) {
	t.Helper()
	if err := a.Check(); err != nil {
		t.Fatal(err)
	}
}

func mustPut(t testing.TB, a *Arena, b Block) {
	t.Helper()
	if err := a.Put(b); err != nil {
		t.Fatalf("Put %d: %v", b.ID, err)
	}
}

// verify reads a block three ways (Get, ReadKV, ViewKV) and compares it to
// want.
func verify(t testing.TB, a *Arena, want Block) {
	t.Helper()
	got, err := a.Get(want.ID)
	if err != nil {
		t.Fatalf("Get %d: %v", want.ID, err)
	}
	if err := sameBlock(got, want); err != nil {
		t.Fatal(err)
	}
	kv, err := a.ReadKV(want.ID, []byte("prefix"))
	if err != nil {
		t.Fatalf("ReadKV %d: %v", want.ID, err)
	}
	if string(kv[:6]) != "prefix" || !bytes.Equal(kv[6:], want.KV) {
		t.Fatalf("ReadKV %d: wrong bytes", want.ID)
	}
	var joined []byte
	if err := a.ViewKV(want.ID, func(parts [][]byte) error {
		for _, p := range parts {
			joined = append(joined, p...)
		}
		return nil
	}); err != nil {
		t.Fatalf("ViewKV %d: %v", want.ID, err)
	}
	if !bytes.Equal(joined, want.KV) {
		t.Fatalf("ViewKV %d: wrong bytes", want.ID)
	}
}

// locate returns the region file and file offset of byte off of a block's
// stream (white-box, for corrupting files on purpose).
func locate(t testing.TB, a *Arena, id uint64, off int64) (string, int64) {
	t.Helper()
	a.mu.RLock()
	defer a.mu.RUnlock()
	r := a.index[id]
	if r == nil {
		t.Fatalf("locate: no block %d", id)
	}
	g := r.slabs[off/a.slab]
	reg, i := a.loc(g)
	return reg.path, a.meta + i*a.slab + off%a.slab
}

// entryFileOffset returns the region file and offset of a block's entry.
func entryFileOffset(t testing.TB, a *Arena, id uint64) (string, int64) {
	t.Helper()
	a.mu.RLock()
	defer a.mu.RUnlock()
	r := a.index[id]
	reg, i := a.loc(r.slabs[0])
	return reg.path, a.entryOff(i)
}

func flipByte(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

func isErr(err, target error) bool { return errors.Is(err, target) }
