package layout

import (
	"github.com/ctxd/ctxd/shm"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Segment spans recorded with a hot set's parked blocks (tiers/
// orphanspans.go): after every sync, and when the session closes and its
// blocks become an orphan tape, the spans of the whole segments its
// arena-parked blocks cover are written beside them, so an orphan tape —
// also one a restarted ctxd finds in the arena — knows where its segments
// lie and can lend the unchanged ones to a prompt that differs early
// (orphandonor.go), or keep them when a session adopts it (adopt.go).

// arenaPrefix is the tape length the session's chain-contiguous arena
// copies cover from the first block on (what its orphan tape would hold)
// and the chain hash of the last of them.
func (h *hotSet) arenaPrefix() (int, shm.Hash) {
	end, chain := 0, shm.Hash{}
	for _, b := range h.blocks {
		if b.res.copyTier() != tiers.Arena {
			break
		}
		end, chain = b.vstart+b.n, b.chain
	}
	return end, chain
}

// recordSpans records the segments the session's parked blocks cover,
// under compat (the prompt's compatibility key; empty: the session lends
// nothing, e.g. one opened cold). Sessions with no arena, no parked block
// or no whole segment in them record nothing.
func (h *hotSet) recordSpans(compat string) {
	t := h.env.Tiers
	if !t.HasArena() {
		return
	}
	end, chain := h.arenaPrefix()
	spans := wholeSpans(h.tape.spans, end)
	if end == 0 || len(spans) == 0 || compat == "" {
		t.DropSpans(h.sessionID)
		return
	}
	t.RecordSpans(h.sessionID, h.env.NewBlockID, tiers.SpansRecord{Compat: compat, Covered: end, Chain: chain,
		ApproxFrom: approxWithin(h.tape.approxFrom, end), Spans: spans})
}

// approxWithin is an approximate mark as seen by the first n tokens: -1
// when they are all exact.
func approxWithin(approxFrom, n int) int {
	if approxFrom >= n {
		return -1
	}
	return approxFrom
}

// wholeSpans are the spans lying wholly in the first n tokens, as the
// tiers record them (a segment cut by n could never equal a prompt's).
func wholeSpans(spans []Span, n int) []tiers.OrphanSpan {
	var out []tiers.OrphanSpan
	at := 0
	for _, sp := range spans {
		if sp.End > n {
			break
		}
		if sp.Start < at || sp.End <= sp.Start || !sp.Seg.Kind.Valid() || !sp.Seg.Class.Valid() {
			continue // empty, overlapping or unnamed: not a segment to lend
		}
		out = append(out, tiers.OrphanSpan{Start: sp.Start, End: sp.End, ID: sp.Seg.ID, Kind: sp.Seg.Kind, Class: sp.Seg.Class,
			Stable: sp.Seg.Stable, Generated: sp.Generated})
		at = sp.End
	}
	return out
}

// tapeSpans are recorded spans as a tape's.
func tapeSpans(spans []tiers.OrphanSpan) []Span {
	out := make([]Span, len(spans))
	for i, s := range spans {
		out[i] = Span{Start: s.Start, End: s.End, Generated: s.Generated}
		out[i].Seg.ID, out[i].Seg.Kind, out[i].Seg.Class, out[i].Seg.Stable = s.ID, s.Kind, s.Class, s.Stable
	}
	return out
}

// wholeTapeSpans are the spans lying wholly in the first n tokens.
func wholeTapeSpans(spans []Span, n int) []Span {
	k := 0
	for k < len(spans) && spans[k].End <= n {
		k++
	}
	return spans[:k]
}
