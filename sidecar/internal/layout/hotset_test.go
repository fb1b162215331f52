package layout

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/engine/enginefake"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/shm"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Hot sets on the fake engine (engine/enginefake), with a real arena and
// SSD tier in temporary folders and no daemon: each test runs in
// milliseconds.

type nopObserver struct{}

func (nopObserver) FetchPhase(tiers.Phase, uint64) func() time.Duration {
	start := time.Now()
	return func() time.Duration { return time.Since(start) }
}
func (nopObserver) Fetched(tiers.Tier, time.Duration) {}
func (nopObserver) SSDRead(int, time.Duration)        {}
func (nopObserver) Parked()                           {}
func (nopObserver) ArenaChanged(*shm.Arena)           {}

type counters struct{ evicted, admitted, dropped int }

func (c *counters) Evicted()      { c.evicted++ }
func (c *counters) Admitted()     { c.admitted++ }
func (c *counters) ArenaDropped() { c.dropped++ }

// testHotSet is a hot set of 256 tokens (blocks of 64, 4 sinks, a recent
// window of 64) on the fake engine, parking into an arena of arenaBytes
// and spilling to an SSD tier.
type testHotSet struct {
	eng   *enginefake.Backend
	h     *hotSet
	tape  *Tape
	ectx  engine.Context
	count *counters
}

func newTestHotSet(t *testing.T, arenaBytes int64) *testHotSet {
	t.Helper()
	ctx := context.Background()
	model := filepath.Join(t.TempDir(), "fake.gguf")
	if err := os.WriteFile(model, []byte("enginefake model for layout tests"), 0o600); err != nil {
		t.Fatal(err)
	}
	eng := enginefake.New(enginefake.DefaultOptions())
	m, err := eng.Load(ctx, model, engine.ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	hc := HotConfig{Budget: 256, Window: 1024, Limit: 256, Block: 64, Sinks: 4, Recent: 64, Reserve: 32, Scorers: policy.ScorerLexical}
	ectx, err := m.NewContext(engine.ContextOptions{ContextTokens: hc.Limit + 2*hc.Block, BatchTokens: 64, KVType: policy.KVTypeF16, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ectx.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	tr := tiers.New(log, nopObserver{}, eng.BlobCodec())
	tr.OpenSSD(ctx, tiers.SSDConfig{Dir: filepath.Join(t.TempDir(), "cold"), QuotaBytes: 1 << 30})
	if tr.SSD() == nil {
		t.Fatal("the SSD tier did not open")
	}
	t.Cleanup(func() { tr.Close(context.Background()) })
	arena, _, err := shm.Open(filepath.Join(t.TempDir(), "shm"), shm.Options{SlabBytes: 16 << 10, RegionBytes: 1 << 20, BudgetBytes: arenaBytes, Compat: "layout-test"})
	if err != nil {
		t.Fatal(err)
	}
	facts := m.Facts()
	tr.Attach(arena, arenaBytes, nil, tiers.Compat(facts.Digest, policy.KVTypeF16, false, 1, ""), tiers.ElemBytes(policy.KVTypeF16))
	t.Cleanup(tr.Detach)
	var next uint64
	c := &counters{}
	env := &Env{
		Engine: ectx, Tiers: tr, Counters: c, Hot: &hc,
		ContextTokens: hc.Limit, KVBytesPerToken: facts.KVBytesPerToken(policy.KVTypeF16),
		SessionTokens: func() int { return 1 << 20 },
		NewBlockID:    func() uint64 { next++; return next },
		RestoreRates:  func() (float64, float64, float64) { return 1e9, 1e9, 1e4 },
		Yield:         func() error { return nil },
		Contended:     func() bool { return false },
		Progress:      func(context.Context, string, int, int) {},
		WantsProgress: func(context.Context) bool { return false },
	}
	tape := NewTape()
	h := NewHotSet(env, &tape, 1).(*hotSet)
	return &testHotSet{eng: eng, h: h, tape: &tape, ectx: ectx, count: c}
}

func (x *testHotSet) check(t *testing.T) {
	t.Helper()
	if err := Check(x.h, x.ectx.Used()); err != nil {
		t.Fatal(err)
	}
}

func (x *testHotSet) residency() *pb.ExplainReply {
	rep := &pb.ExplainReply{TokensByClass: map[string]int64{}}
	x.h.Explain(rep)
	return rep
}

func randomTokens(seed uint64, n int) []engine.Token {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]engine.Token, n)
	for i := range out {
		out[i] = engine.Token(3 + rng.IntN(200))
	}
	return out
}

// prompt is toks as one stable segment, then turn as the turn's own.
func prompt(toks, turn []engine.Token) Prompt {
	all := append(append([]engine.Token(nil), toks...), turn...)
	spans := []Span{{Seg: policy.Segment{ID: "hay", Kind: policy.KindTerminal, Stable: true}, Start: 0, End: len(toks)}}
	if len(turn) > 0 {
		spans = append(spans, Span{Seg: policy.Segment{ID: "ask", Kind: policy.KindUserTurn}, Start: len(toks), End: len(all)})
	}
	return Prompt{Tokens: all, Spans: spans, Turn: len(toks)}
}

// A stream far longer than the hot set keeps the invariants: blocks tile
// the tape, the engine holds exactly the hot ranges, a full arena spills
// to the SSD tier and loses nothing.
func TestHotSetStreamSpillsAndKeepsInvariants(t *testing.T) {
	x := newTestHotSet(t, 256<<10)
	hay := randomTokens(1, 3000)
	r, err := x.h.Sync(context.Background(), prompt(hay, nil), false, true, false)
	if err != nil {
		t.Fatal(err)
	}
	x.check(t)
	rep := x.residency()
	if r.Prefilled != len(hay) || x.count.evicted == 0 || rep.ColdBlocks == 0 || rep.LostBlocks != 0 {
		t.Fatalf("prefilled %d of %d, %d evictions, %d blocks spilled, %d lost", r.Prefilled, len(hay), x.count.evicted, rep.ColdBlocks, rep.LostBlocks)
	}
}

// The defect this package's tiers calls fixed: a turn cancelled while its
// admissions read from the SSD tier fails with ErrCancelled, keeps every
// spilled block spilled (before, a failed read forgot the block's SSD
// copy) and leaves the layout consistent; the next turn admits from the
// SSD tier.
func TestCancelledSSDAdmissionKeepsBlocksSpilled(t *testing.T) {
	x := newTestHotSet(t, 256<<10)
	hay := randomTokens(2, 3000)
	if _, err := x.h.Sync(context.Background(), prompt(hay, nil), false, true, false); err != nil {
		t.Fatal(err)
	}
	before := x.residency()
	// Ask for the first blocks' tokens: they were spilled first.
	ask := append([]engine.Token(nil), hay[4:36]...)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := x.h.Sync(ctx, prompt(hay, ask), true, false, true)
	if !errors.Is(err, protocol.ErrCancelled) {
		t.Fatalf("a cancelled turn: %v, want ErrCancelled", err)
	}
	x.check(t)
	after := x.residency()
	if !slices.ContainsFunc(after.Diagnostics, func(d string) bool { return strings.Contains(d, "unreadable from the ssd tier") }) {
		t.Fatalf("the cancelled turn read nothing back from the SSD tier; diagnostics %q", after.Diagnostics)
	}
	if after.ColdBlocks != before.ColdBlocks || after.LostBlocks != 0 {
		t.Fatalf("spilled blocks %d before a cancelled turn, %d after, %d lost (diagnostics %q)", before.ColdBlocks, after.ColdBlocks, after.LostBlocks, after.Diagnostics)
	}
	admitted := x.count.admitted
	if _, err := x.h.Sync(context.Background(), prompt(hay, ask), true, false, true); err != nil {
		t.Fatal(err)
	}
	x.check(t)
	fromSSD := 0
	for _, b := range x.h.blocks {
		if b.res == resHotSpilled {
			fromSSD++
		}
	}
	if x.count.admitted == admitted || fromSSD == 0 {
		t.Fatalf("the next turn admitted %d blocks, %d of them from the SSD tier", x.count.admitted-admitted, fromSSD)
	}
}
