package layout

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

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
