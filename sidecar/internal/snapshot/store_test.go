package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/engine/enginefake"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	"github.com/ctxd/ctxd/shm"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

type nopObserver struct{}

func (nopObserver) FetchPhase(tiers.Phase, uint64) func() time.Duration {
	return func() time.Duration { return 0 }
}
func (nopObserver) Fetched(tiers.Tier, time.Duration)   {}
func (nopObserver) SSDRead(int, time.Duration)          {}
func (nopObserver) Parked()                             {}
func (nopObserver) ArenaChanged(*shm.Arena)             {}
func (nopObserver) ObserveColdWrite(int, time.Duration) {}

func testTiers(t *testing.T) *tiers.Tiers {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	tr := tiers.New(log, nopObserver{}, enginefake.Codec{})
	tr.OpenSSD(context.Background(), tiers.SSDConfig{Dir: filepath.Join(t.TempDir(), "cold"), QuotaBytes: 1 << 30})
	if tr.SSD() == nil {
		t.Fatal("the SSD tier did not open")
	}
	t.Cleanup(func() { tr.Close(context.Background()) })
	return tr
}

// capture is a dense session of tape captured as one blob.
func capture(name string, compat coldstore.Compat, tape []engine.Token) *Capture {
	c := NewCapture(name, compat, tape, 2)
	c.Mode = "dense"
	blob := make([]byte, 8*len(tape))
	for i, tok := range tape {
		blob[8*i] = byte(tok)
	}
	c.Add(coldstore.BlockMeta{Chain: shm.ChainHash(shm.Hash{}, tape), Tokens: tape, Pos0: 0}, blob)
	meta, _ := json.Marshal(Meta{Format: Format, Mode: c.Mode, Tape: EncodeTape(tape)})
	c.Snap.Meta = meta
	return c
}

func tokens(n, base int) []engine.Token {
	out := make([]engine.Token, n)
	for i := range out {
		out[i] = engine.Token(base + i)
	}
	return out
}

// A committed snapshot is indexed, found again by a new Store on the same
// SSD tier, loaded only for its own compat, shared blobs are written once,
// and pruning keeps the newest automatic snapshots.
func TestStoreCommitIndexLoadPrune(t *testing.T) {
	ctx := context.Background()
	tr := testTiers(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := New(log, tr, nopObserver{}, 2)
	compat := tiers.Compat("digest", policy.KVTypeF16, false, 1, "")
	tape := tokens(100, 3)
	rep, err := s.Commit(ctx, capture("a", compat, tape))
	if err != nil || rep.NewBlocks != 1 || rep.Tokens != 100 {
		t.Fatalf("commit: %+v %v", rep, err)
	}
	if again, err := s.Commit(ctx, capture("b", compat, tape)); err != nil || again.NewBlocks != 0 {
		t.Fatalf("a second snapshot of the same tape: %+v %v (its blob must be shared)", again, err)
	}
	for i := range 3 {
		c := capture(AutoPrefix+string(rune('1'+i)), compat, tokens(10, 50*i))
		c.Snap.Created = time.Now().Add(time.Duration(i) * time.Second)
		if _, err := s.Commit(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	s.PruneAuto(ctx)
	if s.Entry(AutoPrefix+"1") != nil || s.Entry(AutoPrefix+"3") == nil || s.Count() != 4 {
		t.Fatalf("after pruning to 2 automatic snapshots: %d indexed", s.Count())
	}

	fresh := New(log, tr, nopObserver{}, 2)
	fresh.LoadIndex(ctx)
	if e := fresh.Entry("a"); e == nil || !slices.Equal(e.Tape, tape) || e.Mode != "dense" {
		t.Fatalf("the index read back: %+v", e)
	}
	names := []string{}
	for _, e := range fresh.Candidates(compat, "dense") {
		names = append(names, e.Name)
	}
	if !slices.IsSorted(names) || len(names) != 4 {
		t.Fatalf("candidates %v: want the 4 snapshots by name", names)
	}
	if len(fresh.Candidates(compat, "hot")) != 0 {
		t.Fatal("a dense snapshot offered to a hot-set session")
	}
	if _, meta, err := fresh.Load(ctx, "a", compat, true); err != nil || meta.Format != Format {
		t.Fatalf("load: %v", err)
	}
	other := tiers.Compat("other-model", policy.KVTypeF16, false, 1, "")
	if _, _, err := fresh.Load(ctx, "a", other, true); !errors.Is(err, protocol.ErrIncompatible) {
		t.Fatalf("load for another model: %v, want ErrIncompatible", err)
	}
	if _, _, err := fresh.Load(ctx, "a", compat, false); !errors.Is(err, protocol.ErrNoModel) {
		t.Fatalf("load without a model: %v, want ErrNoModel", err)
	}
	if err := fresh.Delete(ctx, "a"); err != nil || fresh.Entry("a") != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, _, err := fresh.Load(ctx, "a", compat, true); !errors.Is(err, protocol.ErrNotFound) {
		t.Fatalf("load after delete: %v, want ErrNotFound", err)
	}
}

// The index keeps a snapshot's segment ranges, also read back by a new
// Store: a resume past the first change matches segments against them.
func TestStoreIndexKeepsSpans(t *testing.T) {
	ctx := context.Background()
	tr := testTiers(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := New(log, tr, nopObserver{}, 2)
	compat := tiers.Compat("digest", policy.KVTypeF16, false, 1, "")
	tape := tokens(100, 3)
	c := capture("spans", compat, tape)
	c.Spans = []Span{{Start: 0, End: 40}, {Start: 40, End: 100}}
	meta, _ := json.Marshal(Meta{Format: Format, Mode: c.Mode, Tape: EncodeTape(tape), Spans: c.Spans})
	c.Snap.Meta = meta
	if _, err := s.Commit(ctx, c); err != nil {
		t.Fatal(err)
	}
	want := []policy.SpanRange{{Start: 0, End: 40}, {Start: 40, End: 100}}
	if e := s.Entry("spans"); e == nil || !slices.Equal(e.Spans, want) {
		t.Fatalf("committed entry %+v: want spans %v", e, want)
	}
	fresh := New(log, tr, nopObserver{}, 2)
	fresh.LoadIndex(ctx)
	if e := fresh.Entry("spans"); e == nil || !slices.Equal(e.Spans, want) {
		t.Fatalf("entry read back %+v: want spans %v", e, want)
	}
}
