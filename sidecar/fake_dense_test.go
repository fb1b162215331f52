package sidecar_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/ctxd/ctxd/engine/enginefake"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar"
)

// A warm prompt (its prefix reused from the KV) and a cold one (prefilled
// from nothing) continue alike; so does a session parked for another and
// brought back: the engine then holds the same KV, byte for byte.
func TestFakeDenseWarmColdAndParked(t *testing.T) {
	d := startFake(t, sidecar.Config{ContextTokens: 1024, NoCold: true}, enginefake.Options{})
	sys, file := ids(1, 100, 0, 250), ids(2, 200, 0, 250)
	m := manifest(seg("sys", pb.SegmentKind_SEGMENT_KIND_SYSTEM, sys), seg("file", pb.SegmentKind_SEGMENT_KIND_REPO_MAP, file))
	a := d.open("a")
	if r := d.mustEnsure(a, m); r.GetPrefilledTokens() != 301 || r.GetPromptTokens() != 301 {
		t.Fatalf("first prefix %+v: want BOS + 300 prefilled", r)
	}
	d.mustSuffix(a)
	state := d.resident().State
	cold := d.greedy(a, 12)
	// Warm: the same prompt again keeps the tape (what follows may be
	// reused by PrefillSuffix), which then drops what was generated and
	// recomputes the last prompt token for its logits.
	if r := d.mustEnsure(a, m); r.GetReusedTokens() != 301 || r.GetPrefilledTokens() != 0 || r.GetDroppedTokens() != 0 {
		t.Fatalf("warm prefix %+v", r)
	}
	if r := d.mustSuffix(a); r.GetPromptTokens() != 301 || r.GetPrefilledTokens() != 1 || r.GetDroppedTokens() != int64(len(cold))+1 {
		t.Fatalf("warm suffix %+v", r)
	}
	if !bytes.Equal(d.resident().State, state) {
		t.Fatal("warm KV differs from cold KV")
	}
	if warm := d.greedy(a, 12); !slices.Equal(warm, cold) {
		t.Fatalf("warm %v, cold %v", warm, cold)
	}
	// Parked: another session takes the engine, then a's turn again.
	b := d.open("b")
	d.mustEnsure(b, manifest(seg("other", pb.SegmentKind_SEGMENT_KIND_SYSTEM, ids(3, 150, 0, 250))))
	d.mustSuffix(b)
	d.greedy(b, 4)
	d.mustEnsure(a, m)
	d.mustSuffix(a)
	if back := d.greedy(a, 12); !slices.Equal(back, cold) {
		t.Fatalf("after parking %v, alone %v", back, cold)
	}
	// A second session with the same prompt, prefilled cold, continues
	// alike too.
	c := d.open("c")
	d.mustEnsure(c, m)
	d.mustSuffix(c)
	if other := d.greedy(c, 12); !slices.Equal(other, cold) {
		t.Fatalf("another session %v, first %v", other, cold)
	}
	// An extension reuses the whole prompt; the engine then holds the
	// tape, token i at position i.
	ext := ids(4, 50, 0, 250)
	m.Segments = append(m.Segments, seg("ext", pb.SegmentKind_SEGMENT_KIND_TERMINAL, ext))
	if r := d.mustEnsure(a, m); r.GetReusedTokens() != 301 || r.GetPrefilledTokens() != 50 {
		t.Fatalf("extension %+v", r)
	}
	res := d.resident()
	want := withBOS(sys, file, ext)
	got := make([]int32, len(res.Tokens))
	for i, tok := range res.Tokens {
		got[i] = int32(tok)
	}
	if !slices.Equal(got, want) || res.Positions[len(res.Positions)-1] != len(want)-1 {
		t.Fatalf("engine holds %d tokens (last at %d), want the %d of the tape at their indices", len(got), res.Positions[len(res.Positions)-1], len(want))
	}
}
