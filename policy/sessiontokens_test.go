package policy

import (
	"math/rand"
	"testing"
)

func TestSessionTokens(t *testing.T) {
	in := SessionTokensInput{HotLimit: 1000, BlockTokens: 64, KVBytesPerToken: 1024, RecordHeaderBytes: 160, TokenBytes: 4,
		SlabBytes: 64 << 10, CapacitySlabs: 100, ColdBytes: 1 << 20}
	// A block: 160 + 4·64 + 1024·64 + 32·64 = 68,000 bytes: two slabs.
	if got := ArenaRecordBytes(in, 64); got != 68000 {
		t.Fatalf("ArenaRecordBytes = %d", got)
	}
	if got, want := SessionTokens(in), 1000+50*64+1024; got != want {
		t.Errorf("SessionTokens = %d, want %d", got, want)
	}
	in.SlabBytes, in.ArenaBytes = 0, 1<<20 // no arena open: its budget as raw KV
	if got, want := SessionTokens(in), 1000+1024+1024; got != want {
		t.Errorf("SessionTokens without an arena = %d, want %d", got, want)
	}
	in.KVBytesPerToken = 0 // counts as 1
	if got := SessionTokens(in); got != 1000+1<<20+1<<20 {
		t.Errorf("SessionTokens with KV 0 = %d", got)
	}
}

// More slabs, a larger quota or a larger arena never shrink a session,
// which always holds at least the hot limit.
func TestSessionTokensProperties(t *testing.T) {
	r := rand.New(rand.NewSource(15))
	for range 3000 {
		in := SessionTokensInput{HotLimit: r.Intn(10000), BlockTokens: 1 + r.Intn(128), KVBytesPerToken: int64(r.Intn(100000)),
			RecordHeaderBytes: 160, TokenBytes: 4, SlabBytes: int64(r.Intn(2)) * 4096 << r.Intn(6), CapacitySlabs: int64(r.Intn(10000)),
			ArenaBytes: int64(r.Intn(1 << 30)), ColdBytes: int64(r.Intn(1 << 30))}
		n := SessionTokens(in)
		if n < in.HotLimit {
			t.Fatalf("%+v: %d below the hot limit", in, n)
		}
		more := in
		more.CapacitySlabs++
		more.ColdBytes += int64(r.Intn(1 << 20))
		more.ArenaBytes += int64(r.Intn(1 << 20))
		if SessionTokens(more) < n {
			t.Fatalf("%+v: grew and shrank", in)
		}
		if in.SlabBytes > 0 && ArenaRecordBytes(in, in.BlockTokens) < in.RecordHeaderBytes+int64(in.BlockTokens)*(in.TokenBytes+max(in.KVBytesPerToken, 1)) {
			t.Fatalf("%+v: a record smaller than its parts", in)
		}
	}
}
