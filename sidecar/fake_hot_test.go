package sidecar_test

import (
	"slices"
	"testing"

	"github.com/ctxd/ctxd/engine/enginefake"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar"
)

// hotConfig is a hot set of 256 tokens (blocks of 64) over a 16 MiB arena.
func hotConfig() sidecar.Config {
	return sidecar.Config{ContextTokens: 256, HotTokens: 256, ArenaBytes: 16 << 20, NoCold: true}
}

// Streaming far past the hot budget evicts blocks to the arena, keeps
// the sinks and the recent tokens hot, and keeps the engine's positions
// compacted: the hot ranges, and only they, tile [0, hot).
func TestFakeHotSetEvictsAndCompacts(t *testing.T) {
	d := startFake(t, hotConfig(), enginefake.Options{})
	hay := ids(1, 3000, 0, 250)
	id := d.open("hay")
	m := manifest(seg("hay", pb.SegmentKind_SEGMENT_KIND_TERMINAL, hay))
	if r := d.mustEnsure(id, m); r.GetPrefilledTokens() != 3001 {
		t.Fatalf("prefilled %d of 3001", r.GetPrefilledTokens())
	}
	stream := withBOS(hay)
	ex := checkHotLayout(t, d, id, stream)
	if ex.GetHotTokens() > 256 || ex.GetParkedTokens() < 2500 || ex.GetEvictions() == 0 || ex.GetResidentTokens() != 3001 {
		t.Fatalf("explain: hot %d parked %d evictions %d resident %d", ex.GetHotTokens(), ex.GetParkedTokens(), ex.GetEvictions(), ex.GetResidentTokens())
	}
	hr := ex.GetHotRanges()
	if hr[0].GetStart() != 0 || hr[len(hr)-1].GetEnd() != 3001 {
		t.Fatalf("hot ranges %v: the sinks (from 0) and the recent tokens (to 3001) must stay hot", hr)
	}
	// An extension reuses everything and keeps the layout.
	m.Segments = append(m.Segments, seg("more", pb.SegmentKind_SEGMENT_KIND_TERMINAL, hay[:300]))
	if r := d.mustEnsure(id, m); r.GetReusedTokens() != 3001 || r.GetPrefilledTokens() != 300 {
		t.Fatalf("extension: %+v", r)
	}
	stream = append(stream, hay[:300]...)
	checkHotLayout(t, d, id, stream)
	// An edit far back keeps every token before it (the head of the block
	// it falls in too) and streams the rest again.
	edited := slices.Clone(hay)
	edited[1000] = int32(enginefake.ByteToken(251))
	m.Segments[0].Tokens = edited
	r := d.mustEnsure(id, m)
	if r.GetReusableTokens() != 1001 || r.GetReusedTokens() != 1001 {
		t.Fatalf("edit: %+v", r)
	}
	stream = append(withBOS(edited), hay[:300]...)
	checkHotLayout(t, d, id, stream)
	// A turn and a long decode keep it too.
	d.mustSuffix(id, seg("ask", pb.SegmentKind_SEGMENT_KIND_USER_TURN, ids(2, 20, 0, 250)))
	gen := d.greedy(id, 300)
	stream = append(stream, ids(2, 20, 0, 250)...)
	stream = append(stream, gen...)
	ex = checkHotLayout(t, d, id, stream)
	if ex.GetResidentTokens() != int64(len(stream)) {
		t.Fatalf("resident %d, stream %d", ex.GetResidentTokens(), len(stream))
	}
}

// The same hot-set session continues alike whether it ran alone or
// another session took the engine between its turns (parking and
// restoring a hot set is exact), and whether or not it was run before.
func TestFakeHotSetParksExactly(t *testing.T) {
	run := func(interleave bool) []int32 {
		d := startFake(t, hotConfig(), enginefake.Options{})
		hay := ids(3, 2000, 0, 250)
		a := d.open("a")
		d.mustEnsure(a, manifest(seg("hay", pb.SegmentKind_SEGMENT_KIND_TERMINAL, hay)))
		if interleave {
			b := d.open("b")
			d.mustEnsure(b, manifest(seg("b", pb.SegmentKind_SEGMENT_KIND_TERMINAL, ids(4, 900, 0, 250))))
			d.mustSuffix(b)
			d.greedy(b, 8)
		}
		d.mustSuffix(a, seg("ask", pb.SegmentKind_SEGMENT_KIND_USER_TURN, hay[500:510]))
		return d.greedy(a, 24)
	}
	alone, parked := run(false), run(true)
	if !slices.Equal(alone, parked) {
		t.Fatalf("parked between turns %v, alone %v", parked, alone)
	}
}

// Retrieval brings a parked block back when the turn asks for what it
// holds: the needle's block is admitted into the engine, and without
// retrieval it is not.
func TestFakeRetrievalAdmitsTheNeedle(t *testing.T) {
	// The haystack uses bytes 0..199; the needle only 200..249, so its
	// block is the one the lexical scorer matches.
	hay := ids(5, 1500, 0, 200)
	needle := ids(6, 24, 200, 250)
	copy(hay[40:], needle)
	for _, noRetrieval := range []bool{false, true} {
		cfg := hotConfig()
		if noRetrieval {
			cfg.Scorers = "none"
		}
		d := startFake(t, cfg, enginefake.Options{})
		id := d.open("needle")
		d.mustEnsure(id, manifest(seg("hay", pb.SegmentKind_SEGMENT_KIND_TERMINAL, hay)))
		before := d.explain(id)
		d.mustSuffix(id, seg("query", pb.SegmentKind_SEGMENT_KIND_USER_TURN, needle[:8]))
		stream := append(withBOS(hay), needle[:8]...)
		ex := checkHotLayout(t, d, id, stream)
		found := false
		for _, b := range ex.GetRetrieved() {
			found = found || (b.GetFirstToken() <= 41 && 41+24 <= b.GetFirstToken()+b.GetTokens())
		}
		inEngine := containsRun(d.resident().Tokens, needle)
		switch {
		case noRetrieval && (found || inEngine || len(ex.GetRetrieved()) > 0):
			t.Fatalf("without retrieval: retrieved %v, needle in the engine %v", ex.GetRetrieved(), inEngine)
		case !noRetrieval && (!found || !inEngine || ex.GetAdmissions() <= before.GetAdmissions() || ex.GetRetrievedTokens() == 0):
			t.Fatalf("needle block retrieved %v (%v), in the engine %v, admissions %d → %d", found, ex.GetRetrieved(), inEngine, before.GetAdmissions(), ex.GetAdmissions())
		}
	}
}

func containsRun[T ~int32](hay []T, run []int32) bool {
	for p := 0; p+len(run) <= len(hay); p++ {
		ok := true
		for k, w := range run {
			if int32(hay[p+k]) != w {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
