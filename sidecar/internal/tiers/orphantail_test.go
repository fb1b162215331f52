package tiers

import (
	"testing"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/shm"
)

// tailSpans: the tape's 324 tokens (4 sinks, 5 blocks), then a 30-token
// tail holding the end of the conversation and the generation prompt.
var tailSpans = []OrphanSpan{
	testSpans[0], testSpans[1],
	{Start: 260, End: 330, ID: "msg", Kind: policy.KindUserTurn, Stable: true},
	{Start: 330, End: 354, ID: "gen", Kind: policy.KindUserTurn},
}

// closeWithTail parks a 324-token tape as session 7's blocks, records
// its spans, and closes it with a 30-token tail: its orphan tape.
func closeWithTail(t *testing.T, tr *Tiers, next *uint64) (*OrphanTape, []int32) {
	t.Helper()
	toks := testTokens(354)
	metas := parkTape(t, tr, 7, next, toks[:324])
	newID := func() uint64 { *next++; return *next }
	tr.RecordSpans(7, newID, SpansRecord{Compat: spansCompat, Covered: 324, Chain: metas[5].Chain, ApproxFrom: -1, Spans: tailSpans[:2]})
	o := &OrphanTape{Blocks: metas, Tokens: toks[:324], Session: 7, Spans: tailSpans, ApproxFrom: 340, Since: time.Now()}
	tr.ParkTail(o, newID(), toks[324:], engine.Range{Pos0: 324, Count: 30, Blob: []byte{9, 9, 9}})
	if o.Tail == nil {
		t.Fatal("the tail was not parked")
	}
	tr.KeepOrphan(o)
	return o, toks
}

// A closed session's open tail stays beside its orphan tape, in this run
// and after a restart: its tokens, position and KV, with the spans that
// reach into it; the tape's own tokens stay its blocks'. Freeing the tape
// frees the tail; a session adopting it takes the tail's KV and frees it.
func TestOrphanTailSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	tr, _ := openTiers(t, dir)
	var next uint64
	o, toks := closeWithTail(t, tr, &next)
	if len(tr.Orphans()) != 1 || len(o.Spans) != 4 || len(o.AllTokens()) != 354 || o.ApproxFrom != 340 {
		t.Fatalf("orphan %+v: want its 4 spans over 354 tokens, approximate from 340", o)
	}
	tr.Detach()

	tr, op := openTiers(t, dir)
	if len(op.Orphans) != 1 {
		t.Fatalf("%d orphan tapes after the restart, want 1", len(op.Orphans))
	}
	o = op.Orphans[0]
	if len(o.Tokens) != 324 || o.Tail == nil || o.Tail.Pos != 324 || len(o.Spans) != 4 || o.Spans[3] != tailSpans[3] || o.ApproxFrom != 340 {
		t.Fatalf("orphan after the restart: %d tokens, tail %+v, spans %+v, approx %d", len(o.Tokens), o.Tail, o.Spans, o.ApproxFrom)
	}
	for i, tk := range o.AllTokens() {
		if tk != toks[i] {
			t.Fatalf("token %d: %d, want %d", i, tk, toks[i])
		}
	}
	if op.MaxID != next {
		t.Fatalf("max id %d, want %d (the tail's id counts)", op.MaxID, next)
	}
	kv, ok := tr.TakeTail(tr.TakeOrphan(0))
	if !ok || len(kv) != 3 || kv[0] != 9 {
		t.Fatalf("the tail's KV: %v (%v)", kv, ok)
	}
	if st, _ := tr.ArenaStats(); st.Blocks != 6 {
		t.Fatalf("%d arena blocks after the tail was taken, want the tape's 6 blocks", st.Blocks)
	}
	for _, m := range o.Blocks {
		tr.DropParked(m.ID)
	}

	closeWithTail(t, tr, &next)
	if !tr.FreeOrphan() {
		t.Fatal("no orphan to free")
	}
	if st, _ := tr.ArenaStats(); st.Blocks != 0 {
		t.Fatalf("%d arena blocks left after freeing the only orphan, its tail included", st.Blocks)
	}
}

// A tail that is gone (corrupt: the arena dropped it at load), follows
// another block than the tape's last, or is one no spans record names is
// dropped at load, harmlessly: the tape is kept with the spans of its
// blocks, and every block no tape uses is freed.
func TestCorruptOrphanTailIsDropped(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, tr *Tiers, o *OrphanTape, next *uint64)
		spans int // the tape's spans after the restart
	}{
		{"gone", func(t *testing.T, tr *Tiers, o *OrphanTape, _ *uint64) {
			if err := tr.arena.Delete(o.Tail.ID); err != nil {
				t.Fatal(err)
			}
		}, 2},
		{"after another block", func(t *testing.T, tr *Tiers, o *OrphanTape, _ *uint64) {
			b, err := tr.arena.Get(o.Tail.ID)
			if err != nil {
				t.Fatal(err)
			}
			b.Chain = tailChain(o.Blocks[4].Chain, b.Tokens)
			if err := tr.arena.Put(b); err != nil {
				t.Fatal(err)
			}
		}, 2},
		{"other tokens", func(t *testing.T, tr *Tiers, o *OrphanTape, _ *uint64) {
			b, err := tr.arena.Get(o.Tail.ID)
			if err != nil {
				t.Fatal(err)
			}
			b.Tokens[0]++ // its chain hash no longer matches
			if err := tr.arena.Put(b); err != nil {
				t.Fatal(err)
			}
		}, 2},
		{"named by no record", func(t *testing.T, tr *Tiers, o *OrphanTape, next *uint64) {
			// The record rewritten as a version 1 record (no tail) would be.
			tr.RecordSpans(o.Session, func() uint64 { *next++; return *next }, SpansRecord{Compat: spansCompat, Covered: 324, Chain: o.Blocks[5].Chain, ApproxFrom: -1, Spans: tailSpans[:2]})
		}, 2},
		{"a second tail", func(t *testing.T, tr *Tiers, o *OrphanTape, next *uint64) {
			*next++
			if err := tr.arena.Put(shm.Block{ID: *next, Session: 9, Chain: tailChain(o.Blocks[5].Chain, []int32{1, 2}), Kind: TailRecordKind, SegID: tailSegID,
				Tokens: []int32{1, 2}, KV: []byte{1}}); err != nil {
				t.Fatal(err)
			}
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tr, _ := openTiers(t, dir)
			var next uint64
			o, _ := closeWithTail(t, tr, &next)
			tc.spoil(t, tr, o, &next)
			tr.Detach()
			tr, op := openTiers(t, dir)
			if len(op.Orphans) != 1 || len(op.Orphans[0].Tokens) != 324 {
				t.Fatalf("orphans %+v: want the tape of 324 tokens", op.Orphans)
			}
			o = op.Orphans[0]
			// A second tail: the newest that follows the tape is taken,
			// the record names the other, so neither is kept (a session
			// adopting a tape frees its tail: two never follow one tape).
			if o.Tail != nil {
				t.Fatalf("tail %+v kept", o.Tail)
			}
			if len(o.Spans) != tc.spans || o.ApproxFrom != -1 {
				t.Fatalf("spans %+v, approx %d: want the blocks' %d spans, no approximate mark", o.Spans, o.ApproxFrom, tc.spans)
			}
			if st, _ := tr.ArenaStats(); st.Blocks != 6+1 {
				t.Fatalf("%d arena blocks, want the tape's 6 and its spans record (the rest freed)", st.Blocks)
			}
		})
	}
}

// A version 1 spans record (written before tails were parked) is still
// read.
func TestSpansRecordVersion1(t *testing.T) {
	b, err := EncodeSpansRecord(SpansRecord{Compat: spansCompat, Covered: 300, ApproxFrom: 5, Spans: testSpans})
	if err != nil {
		t.Fatal(err)
	}
	// Version 2 → 1: drop the tail's length and chain hash.
	off := len(spansMagic) + 4 + 4 + 32
	v1 := append(append([]byte(nil), b[:off]...), b[off+4+32:]...)
	v1[len(spansMagic)] = 1
	r, err := DecodeSpansRecord(fixCRC(v1))
	if err != nil || r.Covered != 300 || len(r.Spans) != 3 || r.ApproxFrom != 5 || r.TailTokens != 0 {
		t.Fatalf("version 1 record: %+v, %v", r, err)
	}
}
