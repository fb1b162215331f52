package layout

import (
	"context"
	"encoding/binary"
	"slices"
	"testing"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/engine/enginefake"
	"github.com/ctxd/ctxd/policy"
)

// Parts of blocks (kvpart.go) on the fake engine, whose cells keep the
// state they were decoded with: a token's KV is checked for identity by
// that state, wherever the layout moved it.

// blobStates are the states of a fake engine blob's cells, by position.
func blobStates(t *testing.T, blob []byte) map[int]uint64 {
	t.Helper()
	body, _ := enginefake.Codec{}.TokenMajor(blob)
	const headerBytes, trailerBytes = 24, 4
	n := int(binary.LittleEndian.Uint32(body[8:]))
	cb := int(binary.LittleEndian.Uint32(body[12:]))
	if len(body) != headerBytes+n*cb+trailerBytes {
		t.Fatalf("a blob of %d bytes for %d cells of %d", len(body), n, cb)
	}
	out := make(map[int]uint64, n)
	for i := 0; i < n; i++ {
		r := body[headerBytes+i*cb:]
		out[int(int32(binary.LittleEndian.Uint32(r)))] = binary.LittleEndian.Uint64(r[8:])
	}
	return out
}

// tapeStates are the states of the tape's tokens, by tape index: from the
// engine for what is hot, from the copies for parked blocks.
func (x *testHotSet) tapeStates(t *testing.T) map[int]uint64 {
	t.Helper()
	r, ok := x.eng.Resident()
	if !ok {
		t.Fatal("no open context")
	}
	engineStates := blobStates(t, r.State)
	out := map[int]uint64{}
	for v := range x.tape.tokens {
		if p, _, ok := x.h.enginePos(v); ok {
			out[v] = engineStates[p]
		}
	}
	for _, b := range x.h.blocks {
		if b.res.inEngine() || b.res.copyTier() == 0 {
			continue
		}
		kv, err := x.h.env.Tiers.Fetch(context.Background(), b.res.copyTier(), b.id, b.ssdKey, nil)
		if err != nil {
			t.Fatal(err)
		}
		for p, st := range blobStates(t, kv) {
			out[b.vstart+p-b.pos0] = st
		}
	}
	return out
}

// A cut inside a sealed block keeps every token before it with its exact
// KV (the block's head becomes the open tail again, taken from the engine
// or read back from its copy), frees the copies of what it drops, and
// the tape stays exact.
func TestHotSetCutInsideABlockKeepsItsKV(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  func(h *hotSet) int // where to cut, in the streamed tape
		hot  bool                // the block cut into is in the engine
	}{
		{"hot block", func(h *hotSet) int { b := h.blocks[len(h.blocks)-1]; return b.vstart + 23 }, true},
		{"parked block", func(h *hotSet) int { return 4 + 64*3 + 40 }, false},
		{"sink block", func(h *hotSet) int { return 2 }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newTestHotSet(t, 1<<20)
			ctx := context.Background()
			hay := randomTokens(3, 1100)
			if _, err := x.h.Sync(ctx, prompt(hay[:1000], nil), false, true, false); err != nil {
				t.Fatal(err)
			}
			n := tc.cut(x.h)
			b := x.h.blockAt(n)
			if b.vstart == n || b.res.inEngine() != tc.hot {
				t.Fatalf("cut at %d: block [%d,+%d) hot %v: not the case this tests", n, b.vstart, b.n, b.res.inEngine())
			}
			before := x.tapeStates(t)
			kept, err := x.h.Cut(ctx, n)
			if err != nil {
				t.Fatal(err)
			}
			x.check(t)
			if kept != n || len(x.tape.tokens) != n || !slices.Equal(x.tape.tokens, hay[:n]) {
				t.Fatalf("cut at %d kept %d tokens (tape %d)", n, kept, len(x.tape.tokens))
			}
			if x.tape.ApproxFrom() != -1 {
				t.Fatalf("the kept KV is marked approximate from %d", x.tape.ApproxFrom())
			}
			after := x.tapeStates(t)
			for v := 0; v < n; v++ {
				if after[v] != before[v] || after[v] == 0 {
					t.Fatalf("token %d: state %x after the cut, %x before", v, after[v], before[v])
				}
			}
			if x.h.tailV != b.vstart {
				t.Fatalf("the open tail starts at %d, want the cut block's start %d", x.h.tailV, b.vstart)
			}
			// The stream goes on as if it had never been cut: the tail
			// seals at the same boundary.
			if err := x.h.AppendTokens(ctx, hay[n:n+100]); err != nil {
				t.Fatal(err)
			}
			x.check(t)
			if b2 := x.h.blockAt(n); b2.vstart != b.vstart || b2.n != b.n {
				t.Fatalf("resealed block [%d,+%d), was [%d,+%d)", b2.vstart, b2.n, b.vstart, b.n)
			}
		})
	}
}

// A cut whose block cannot come back (its copy gone, not in the engine)
// keeps whole blocks only, as before.
func TestHotSetCutIntoALostBlockRoundsDown(t *testing.T) {
	x := newTestHotSet(t, 1<<20)
	ctx := context.Background()
	hay := randomTokens(4, 1000)
	if _, err := x.h.Sync(ctx, prompt(hay, nil), false, true, false); err != nil {
		t.Fatal(err)
	}
	n := 4 + 64*3 + 40
	b := x.h.blockAt(n)
	if b.res.inEngine() {
		t.Fatal("block is hot")
	}
	x.h.dropCopy(b)
	kept, err := x.h.Cut(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	x.check(t)
	if kept != b.vstart {
		t.Fatalf("cut at %d into a lost block kept %d, want %d", n, kept, b.vstart)
	}
}

// A moved run whose first and last blocks are parked and only partly
// inside it brings their parts back (trimmed) instead of prefilling them:
// only the changed tokens are prefilled, and every moved token keeps the
// state it had.
func TestHotSetMovedRunBringsPartialParkedBlocks(t *testing.T) {
	x := newTestHotSet(t, 1<<20)
	ctx := context.Background()
	x.h.env.Reuse = func() ReuseSettings {
		return ReuseSettings{Mode: policy.ReuseAuto, Cost: policy.PrefillCost{BaseSeconds: 1e-3}, LatencySeconds: 1e-9}
	}
	head := randomTokens(5, 30)
	body := randomTokens(6, 1500)
	seg := func(toks ...[]engine.Token) Prompt {
		var p Prompt
		for i, ts := range toks {
			id := []string{"system", "tools"}[i]
			p.Spans = append(p.Spans, Span{Seg: policy.Segment{ID: id, Kind: policy.KindTerminal, Stable: true}, Start: len(p.Tokens), End: len(p.Tokens) + len(ts)})
			p.Tokens = append(p.Tokens, ts...)
		}
		return p
	}
	if _, err := x.h.Sync(ctx, seg(head, body), false, true, false); err != nil {
		t.Fatal(err)
	}
	before := x.tapeStates(t)
	// The system prompt grows by 17 tokens: the body moves by 17, so its
	// first and last blocks are partly inside the run; its start is parked.
	if b := x.h.blockAt(30); b.res.inEngine() || b.vstart == 30 {
		t.Fatalf("block [%d,+%d) at the body's start: hot %v", b.vstart, b.n, b.res.inEngine())
	}
	head2 := append(append([]engine.Token(nil), head...), randomTokens(7, 17)...)
	r, err := x.h.Sync(ctx, seg(head2, body), false, true, false)
	if err != nil {
		t.Fatal(err)
	}
	x.check(t)
	if common := CommonPrefix(head, head2); r.Prefilled != len(head2)-common {
		t.Fatalf("prefilled %d tokens, want the %d changed ones (reused %d, recomputed %d, budget %d; %s)", r.Prefilled, len(head2)-common, r.Reused, r.Recomputed, r.Budget, r.ReuseChoice)
	}
	after := x.tapeStates(t)
	for i := range body {
		if after[len(head2)+i] != before[len(head)+i] {
			t.Fatalf("body token %d: state %x after the move, %x before", i, after[len(head2)+i], before[len(head)+i])
		}
	}
}
