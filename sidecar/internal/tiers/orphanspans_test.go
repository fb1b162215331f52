package tiers

import (
	"bytes"
	"errors"
	"hash/crc32"
	"io"
	"log/slog"
	"math/rand"
	"reflect"
	"testing"
	"time"

	"github.com/ctxd/ctxd/engine/enginefake"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/shm"
)

type nopObserver struct{}

func (nopObserver) FetchPhase(Phase, uint64) func() time.Duration {
	return func() time.Duration { return 0 }
}
func (nopObserver) Fetched(Tier, time.Duration) {}
func (nopObserver) SSDRead(int, time.Duration)  {}
func (nopObserver) Parked()                     {}
func (nopObserver) ArenaChanged(*shm.Arena)     {}

const spansCompat = "model+template"

// openTiers opens the arena in dir (as a restarted ctxd does) and
// attaches it.
func openTiers(t *testing.T, dir string) (*Tiers, *OpenedArena) {
	t.Helper()
	tr := New(slog.New(slog.NewTextHandler(io.Discard, nil)), nopObserver{}, enginefake.Codec{})
	op, err := tr.OpenArena(dir, 8<<20, "arena-compat")
	if err != nil {
		t.Fatal(err)
	}
	tr.Attach(op.Arena, op.Bytes, op.Orphans, Compat("d", 1, false, 1, ""), 2)
	t.Cleanup(tr.Detach)
	return tr, op
}

// parkTape parks toks as session's blocks (4 sink tokens, then 64 each)
// and returns their metadata.
func parkTape(t *testing.T, tr *Tiers, session uint64, next *uint64, toks []int32) []shm.Meta {
	t.Helper()
	var out []shm.Meta
	var prev shm.Hash
	for v := 0; v < len(toks); {
		n := min(64, len(toks)-v)
		if v == 0 {
			n = 4
		}
		*next++
		b := shm.Block{ID: *next, Session: session, Chain: shm.ChainHash(prev, toks[v:v+n]), Kind: uint8(policy.KindTools), Pos: int32(v), Tokens: toks[v : v+n], KV: []byte{byte(v), 1, 2}}
		if err := tr.Park(b); err != nil {
			t.Fatal(err)
		}
		out = append(out, shm.Meta{ID: b.ID, Session: session, Chain: b.Chain, Kind: b.Kind, Pos: b.Pos, NTokens: n})
		prev = b.Chain
		v += n
	}
	return out
}

func testTokens(n int) []int32 {
	r := rand.New(rand.NewSource(int64(n)))
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(r.Intn(250))
	}
	return out
}

var testSpans = []OrphanSpan{
	{Start: 0, End: 68, ID: "sys", Kind: policy.KindSystem, Stable: true},
	{Start: 68, End: 260, ID: "tools", Kind: policy.KindTools, Class: policy.ClassTaskPinned, Stable: true},
	{Start: 260, End: 300, ID: "<generated>", Kind: policy.KindUserTurn, Class: policy.ClassVolatile, Generated: true},
}

// A live session's spans record, left in the arena by a ctxd that
// stopped without closing it (a crash), comes back with its orphan tape;
// one that closed hands it to its orphan tape, rewritten to cover it.
func TestOrphanSpansSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	toks := testTokens(324) // 4 + 5·64
	tr, _ := openTiers(t, dir)
	var next uint64
	metas := parkTape(t, tr, 7, &next, toks)
	// Covered: the first 4 blocks (260 tokens); the record is written
	// before the last block was parked.
	tr.RecordSpans(7, func() uint64 { next++; return next }, SpansRecord{Compat: spansCompat, Covered: 260, Chain: metas[4].Chain, ApproxFrom: 100, Spans: testSpans[:2]})
	tr.Detach() // a crash: nothing closed

	tr, op := openTiers(t, dir)
	if len(op.Orphans) != 1 {
		t.Fatalf("%d orphan tapes after the restart, want 1", len(op.Orphans))
	}
	o := op.Orphans[0]
	if len(o.Tokens) != 324 || len(o.Spans) != 2 || o.Spans[1] != testSpans[1] || o.Compat != spansCompat || o.ApproxFrom != 100 || o.Session != 7 {
		t.Fatalf("orphan: %d tokens, spans %+v, compat %q, approx %d, session %d", len(o.Tokens), o.Spans, o.Compat, o.ApproxFrom, o.Session)
	}
	if op.MaxID != next {
		t.Fatalf("max id %d, want %d (the record's id counts)", op.MaxID, next)
	}
	// Freeing the orphan frees its record too: the arena is empty.
	if !tr.FreeOrphan() {
		t.Fatal("no orphan to free")
	}
	if st, _ := tr.ArenaStats(); st.Blocks != 0 {
		t.Fatalf("%d arena blocks left after freeing the only orphan", st.Blocks)
	}

	// A session that closes: its orphan tape takes the record, covering
	// what the tape holds.
	metas = parkTape(t, tr, 8, &next, toks)
	tr.RecordSpans(8, func() uint64 { next++; return next }, SpansRecord{Compat: spansCompat, Covered: 260, Chain: metas[4].Chain, ApproxFrom: -1, Spans: testSpans[:2]})
	tr.KeepOrphan(&OrphanTape{Blocks: metas, Tokens: toks, Session: 8, Spans: testSpans, ApproxFrom: -1, Since: time.Now()})
	tr.Detach()
	_, op = openTiers(t, dir)
	if len(op.Orphans) != 1 || len(op.Orphans[0].Spans) != 3 || op.Orphans[0].Spans[2] != testSpans[2] {
		t.Fatalf("closed session's orphan after a restart: %+v", op.Orphans)
	}
}

// A session that adopted an orphan tape and closed before sealing a block
// of its own recorded its spans under its own id, while the tape's blocks
// carry the first session's: the record still finds its tape by the
// chain hash it names.
func TestOrphanSpansFoundByChain(t *testing.T) {
	dir := t.TempDir()
	toks := testTokens(324)
	tr, _ := openTiers(t, dir)
	var next uint64
	metas := parkTape(t, tr, 7, &next, toks)
	tr.RecordSpans(9, func() uint64 { next++; return next }, SpansRecord{Compat: spansCompat, Covered: 260, Chain: metas[4].Chain, ApproxFrom: -1, Spans: testSpans[:2]})
	tr.Detach()
	_, op := openTiers(t, dir)
	if len(op.Orphans) != 1 || len(op.Orphans[0].Spans) != 2 || op.Orphans[0].Session != 7 {
		t.Fatalf("orphans %+v: want session 7's tape with session 9's spans", op.Orphans)
	}
}

// A record that is corrupt, hostile (well formed, but naming blocks the
// tape does not hold, or spans past them), of another version, or
// duplicated is dropped at load: the orphan tape stays, without spans,
// and the record's block is freed. Nothing panics.
func TestCorruptOrphanSpansRecordIsDropped(t *testing.T) {
	toks := testTokens(324)
	good := func(metas []shm.Meta) SpansRecord {
		return SpansRecord{Compat: spansCompat, Covered: 260, Chain: metas[4].Chain, ApproxFrom: -1, Spans: testSpans[:2]}
	}
	encode := func(t *testing.T, r SpansRecord) []byte {
		b, err := EncodeSpansRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		rec  func(t *testing.T, metas []shm.Meta) []byte
	}{
		{"garbage", func(*testing.T, []shm.Meta) []byte { return []byte("CTXDSPAN and then nothing that parses") }},
		{"flipped bit", func(t *testing.T, m []shm.Meta) []byte { b := encode(t, good(m)); b[20] ^= 1; return b }},
		{"another chain", func(t *testing.T, m []shm.Meta) []byte { r := good(m); r.Chain = m[3].Chain; return encode(t, r) }},
		{"no block ends there", func(t *testing.T, m []shm.Meta) []byte {
			r := good(m)
			r.Covered, r.Spans = 259, testSpans[:1]
			return encode(t, r)
		}},
		{"past the tape", func(t *testing.T, m []shm.Meta) []byte {
			r := good(m)
			r.Covered, r.Spans = 1000, []OrphanSpan{{Start: 0, End: 1000, Kind: policy.KindTools}}
			return encode(t, r)
		}},
		{"another version", func(t *testing.T, m []shm.Meta) []byte {
			b := encode(t, good(m))
			b[8] = 9
			return fixCRC(b)
		}},
		{"spans out of order", func(t *testing.T, m []shm.Meta) []byte {
			b := encode(t, SpansRecord{Compat: spansCompat, Covered: 260, Chain: m[4].Chain, ApproxFrom: -1, Spans: []OrphanSpan{testSpans[1]}})
			// The span's start (68) becomes 32767, past its end.
			off := len(spansMagic) + 4 + 4 + 32 + 4 + 32 + 4 + 4 + len(spansCompat) + 4
			b[off], b[off+1] = 0xFF, 0x7F // start 32767 > end
			return fixCRC(b)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tr, _ := openTiers(t, dir)
			var next uint64
			metas := parkTape(t, tr, 7, &next, toks)
			rec := tc.rec(t, metas)
			next++
			if err := tr.arena.Put(shm.Block{ID: next, Session: 7, Chain: spansChain(rec), Kind: SpansRecordKind, SegID: spansSegID, KV: rec}); err != nil {
				t.Fatal(err)
			}
			tr.Detach()
			tr, op := openTiers(t, dir)
			if len(op.Orphans) != 1 || len(op.Orphans[0].Tokens) != 324 || op.Orphans[0].Spans != nil {
				t.Fatalf("orphans %+v: want the tape, without spans", op.Orphans)
			}
			if st, _ := tr.ArenaStats(); st.Blocks != len(metas) {
				t.Fatalf("%d arena blocks, want the tape's %d (the record freed)", st.Blocks, len(metas))
			}
		})
	}
}

func fixCRC(b []byte) []byte {
	n := len(b) - 4
	c := crc32.Checksum(b[:n], castagnoli)
	b[n], b[n+1], b[n+2], b[n+3] = byte(c), byte(c>>8), byte(c>>16), byte(c>>24)
	return b
}

// Every truncation, extension and single-byte change of a record fails
// to decode or decodes to well-formed spans; random bytes never panic.
func TestDecodeSpansRecordFailsClosed(t *testing.T) {
	rec := SpansRecord{Compat: spansCompat, Covered: 300, ApproxFrom: 5, Spans: testSpans}
	b, err := EncodeSpansRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeSpansRecord(b)
	if err != nil || got.Covered != 300 || got.ApproxFrom != 5 || len(got.Spans) != 3 || got.Spans[2] != testSpans[2] {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for n := range len(b) {
		if _, err := DecodeSpansRecord(b[:n]); !errors.Is(err, ErrBadSpansRecord) {
			t.Fatalf("truncated to %d bytes: %v", n, err)
		}
	}
	if _, err := DecodeSpansRecord(append(append([]byte(nil), b...), 0)); !errors.Is(err, ErrBadSpansRecord) {
		t.Fatal("a trailing byte decoded")
	}
	r := rand.New(rand.NewSource(1))
	for range 20000 {
		c := append([]byte(nil), b...)
		c[r.Intn(len(c))] ^= byte(1 + r.Intn(255))
		if r.Intn(2) == 0 {
			c = fixCRC(c)
		}
		if got, err := DecodeSpansRecord(c); err == nil {
			if checkSpans(got.Spans, got.Covered, got.TailTokens, got.ApproxFrom) != nil {
				t.Fatalf("decoded an ill-formed record %+v", got)
			}
		}
		junk := make([]byte, r.Intn(200))
		r.Read(junk)
		DecodeSpansRecord(junk)
	}
	if _, err := EncodeSpansRecord(SpansRecord{Covered: 10, Spans: []OrphanSpan{{Start: 5, End: 20, Kind: policy.KindTools}}}); !errors.Is(err, ErrBadSpansRecord) {
		t.Fatalf("encoding a span past what is covered: %v", err)
	}
}

// FuzzDecodeSpansRecord: any bytes decode to a well-formed record that
// encodes back to the same bytes, or fail with ErrBadSpansRecord; never a
// panic.
func FuzzDecodeSpansRecord(f *testing.F) {
	good, err := EncodeSpansRecord(SpansRecord{Compat: spansCompat, Covered: 300, ApproxFrom: 5, Spans: testSpans})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(spansMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeSpansRecord(b)
		if err != nil {
			if !errors.Is(err, ErrBadSpansRecord) {
				t.Fatalf("unwrapped error %v", err)
			}
			return
		}
		again, err := EncodeSpansRecord(r)
		if err != nil {
			t.Fatalf("a decoded record does not encode: %v", err)
		}
		if leU32(b[len(spansMagic):]) == SpansRecordVersion && !bytes.Equal(again, b) {
			t.Fatal("a decoded record does not encode back")
		}
		if r2, err := DecodeSpansRecord(again); err != nil || !reflect.DeepEqual(r2, r) {
			t.Fatalf("a version 1 record re-encoded decodes as %+v (%v), want %+v", r2, err, r)
		}
	})
}
