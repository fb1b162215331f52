package layout

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/sidecar/internal/snapshot"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// engineAt is what the engine holds and its last logits.
type engineAt struct {
	state  []byte
	logits []float32
}

func (x *testHotSet) at(t *testing.T) engineAt {
	t.Helper()
	r, ok := x.eng.Resident()
	if !ok {
		t.Fatal("no open context")
	}
	return engineAt{state: r.State, logits: append([]float32(nil), x.ectx.Logits()...)}
}

// A turn's prompt, then a long reply (blocks seal, others are evicted),
// then the same prompt again: the engine holds byte for byte what it held
// when the turn started, with the same logits, whether the prompt ended
// at a block boundary (no open tail), with a short tail, or with a tail
// the reply sealed into a block; and a third ask after another reply too.
func TestHotSetRepeatedTurnRestoresItsLayout(t *testing.T) {
	// Blocks of 64 after 4 sinks: a prompt of 4+64k tokens ends at a
	// block boundary.
	for _, n := range []int{4 + 64*30, 4 + 64*30 + 5, 4 + 64*30 + 60} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			x := newTestHotSet(t, 1<<20)
			ctx := context.Background()
			hay := randomTokens(7, n-20)
			p := prompt(hay, hay[100:120])
			if _, err := x.h.Sync(ctx, p, true, false, true); err != nil {
				t.Fatal(err)
			}
			want := x.at(t)
			for ask := 2; ask <= 3; ask++ {
				evicted := x.count.evicted
				if err := x.h.AppendTokens(ctx, randomTokens(uint64(ask), 150)); err != nil {
					t.Fatal(err)
				}
				if x.count.evicted == evicted {
					t.Fatal("the reply evicted nothing")
				}
				r, err := x.h.Sync(ctx, p, true, false, true)
				if err != nil {
					t.Fatal(err)
				}
				x.check(t)
				got := x.at(t)
				if r.Reused != len(p.Tokens) || r.Prefilled != 0 || r.Dropped != 150 {
					t.Fatalf("ask %d: reused %d, prefilled %d, dropped %d of a %d-token prompt and a 150-token reply", ask, r.Reused, r.Prefilled, r.Dropped, len(p.Tokens))
				}
				if !bytes.Equal(got.state, want.state) {
					t.Fatalf("ask %d: the engine holds other KV than when the turn started", ask)
				}
				if !slices.Equal(got.logits, want.logits) {
					t.Fatalf("ask %d: other logits than when the turn started", ask)
				}
			}
		})
	}
}

// A cut elsewhere than the turn's start, or past a lost block, cuts as
// before: the layout stays consistent and the turn's layout is not
// half-restored.
func TestHotSetTurnLayoutNotRestored(t *testing.T) {
	x := newTestHotSet(t, 1<<20)
	ctx := context.Background()
	hay := randomTokens(8, 2000)
	p := prompt(hay, hay[300:320])
	if _, err := x.h.Sync(ctx, p, true, false, true); err != nil {
		t.Fatal(err)
	}
	if err := x.h.AppendTokens(ctx, randomTokens(9, 150)); err != nil {
		t.Fatal(err)
	}
	// A block hot at the turn's start, evicted since, and lost.
	lost := -1
	for i, mb := range x.h.mark.blocks {
		if b := x.h.blocks[i]; mb.hot && !b.res.inEngine() {
			x.h.dropCopy(b)
			lost = i
			break
		}
	}
	if lost < 0 {
		t.Fatal("the reply evicted no block hot at the turn's start")
	}
	if c := x.h.turnChoice(len(p.Tokens)); c.Restore {
		t.Fatalf("a lost block: %+v", c)
	}
	kept, err := x.h.Cut(ctx, len(p.Tokens))
	if err != nil {
		t.Fatal(err)
	}
	x.check(t)
	if kept > len(p.Tokens) || x.h.blocks[lost].res != residencyOf(false, tiers.None) {
		t.Fatalf("kept %d of %d; block %d %v", kept, len(p.Tokens), lost, x.h.blocks[lost].res)
	}
	// Cut below the turn's start: the mark is gone.
	if _, err := x.h.Cut(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	x.check(t)
	if x.h.mark != nil {
		t.Fatal("a cut below the turn's start kept its mark")
	}
}

// Random sessions: turns, replies of any length, repeated requests, cuts
// anywhere and new turns. After every step the invariants hold, and every
// repeated request whose turn layout policy restores finds the engine
// byte for byte as the turn left it, with the same logits.
func TestHotSetTurnLayoutRandomSessions(t *testing.T) {
	ctx := context.Background()
	total := 0
	for seed := uint64(1); seed <= 12; seed++ {
		rng := rand.New(rand.NewPCG(seed, 19))
		x := newTestHotSet(t, 1<<20)
		hay := randomTokens(seed, 800+rng.IntN(2000))
		p := prompt(hay, hay[rng.IntN(500):][:10+rng.IntN(40)])
		if _, err := x.h.Sync(ctx, p, true, false, true); err != nil {
			t.Fatal(err)
		}
		want := x.at(t)
		restored := 0
		for step := 0; step < 12; step++ {
			switch rng.IntN(4) {
			case 0, 1: // a reply, then the same request again
				if err := x.h.AppendTokens(ctx, randomTokens(seed*100+uint64(step), 1+rng.IntN(200))); err != nil {
					t.Fatal(err)
				}
				x.check(t)
				restore := x.h.turnChoice(len(p.Tokens)).Restore
				if _, err := x.h.Sync(ctx, p, true, false, true); err != nil {
					t.Fatal(err)
				}
				x.check(t)
				got := x.at(t)
				if restore {
					restored++
					if !bytes.Equal(got.state, want.state) || !slices.Equal(got.logits, want.logits) {
						t.Fatalf("seed %d step %d: a restored turn holds other KV or logits", seed, step)
					}
				}
				want = got
			case 2: // a cut anywhere, then the request
				if _, err := x.h.Cut(ctx, rng.IntN(len(x.tape.tokens)+1)); err != nil {
					t.Fatal(err)
				}
				x.check(t)
				if _, err := x.h.Sync(ctx, p, true, false, true); err != nil {
					t.Fatal(err)
				}
				x.check(t)
				want = x.at(t)
			case 3: // a new turn after a reply
				if err := x.h.AppendTokens(ctx, randomTokens(seed*1000+uint64(step), 1+rng.IntN(100))); err != nil {
					t.Fatal(err)
				}
				hay = append(append([]engine.Token(nil), x.tape.tokens...), randomTokens(seed+uint64(step), 5+rng.IntN(60))...)
				p = prompt(hay, nil)
				if _, err := x.h.Sync(ctx, p, true, false, true); err != nil {
					t.Fatal(err)
				}
				x.check(t)
				want = x.at(t)
			}
		}
		t.Logf("seed %d: %d repeated requests restored", seed, restored)
		total += restored
	}
	if total == 0 {
		t.Fatal("no repeated request was restored")
	}
}

// A snapshot's mark that does not fit the restored blocks is dropped (the
// session then cuts as usual); one that fits names the restored blocks.
func TestLoadMarkFailsClosed(t *testing.T) {
	blocks := []*hotBlock{{id: 7, vstart: 0, n: 4}, {id: 8, vstart: 4, n: 64}, {id: 9, vstart: 68, n: 64}}
	good := func() *snapshot.TurnMark {
		return &snapshot.TurnMark{At: 100, TailV: 68, TailP: 90, Turn: 3, Blocks: []snapshot.MarkBlock{{Hot: true, PStart: 0}, {Hot: false, PStart: 4}}}
	}
	if m := loadMark(good(), blocks, 150); m == nil || m.blocks[1].id != 8 || m.at != 100 || m.tailP != 90 {
		t.Fatalf("a fitting mark: %+v", m)
	}
	bad := map[string]func(*snapshot.TurnMark){
		"more blocks than restored": func(m *snapshot.TurnMark) { m.Blocks = append(m.Blocks, snapshot.MarkBlock{}, snapshot.MarkBlock{}) },
		"past the tape":             func(m *snapshot.TurnMark) { m.At = 151 },
		"at 0":                      func(m *snapshot.TurnMark) { m.At = 0 },
		"tail past the mark":        func(m *snapshot.TurnMark) { m.TailV = 101 },
		"tail not after its blocks": func(m *snapshot.TurnMark) { m.TailV = 60 },
		"a negative position":       func(m *snapshot.TurnMark) { m.Blocks[0].PStart = -1 },
		"a negative tail position":  func(m *snapshot.TurnMark) { m.TailP = -5 },
	}
	for name, edit := range bad {
		sm := good()
		edit(sm)
		if m := loadMark(sm, blocks, 150); m != nil {
			t.Errorf("%s: loaded %+v", name, m)
		}
	}
	if loadMark(nil, blocks, 150) != nil {
		t.Error("no mark: loaded one")
	}
}
