package sidecar

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	"github.com/ctxd/ctxd/sidecar/internal/layout"
)

// Reuse from other live sessions (layout/donor.go): the sessions a prompt
// may copy KV from, and how a dense session's KV is copied out of what the
// slot parked, without touching the session it belongs to.

// maxDonors bounds the sessions a prompt is matched against.
const maxDonors = 8

// donors are the live sessions a prompt of sess may copy KV from: open,
// not sess, built under the same compatibility key (model, template, KV
// settings), of the same layout, holding tokens, neither opened cold; the
// most recently used first; then the orphan tapes that lend segments
// (orphandonors.go). None for an exact prompt, in --reuse exact, or for a
// session opened cold. The caller holds the slot token.
func (srv *Server) donors(sess *session, key string, exact bool) []layout.Donor {
	if exact || srv.cfg.Reuse == policy.ReuseExact || sess.ephemeral || key == "" {
		return nil
	}
	srv.mu.Lock()
	var cands []*session
	for _, s := range srv.sessions {
		if s != sess && !s.closed && !s.ephemeral && s.compat == key && s.layout != nil && s.tape.Len() > 0 && s.layout.Mode() == sess.layout.Mode() {
			cands = append(cands, s)
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].lastUsed.After(cands[j].lastUsed) })
	srv.mu.Unlock()
	out := make([]layout.Donor, 0, min(len(cands), maxDonors))
	for _, s := range cands[:min(len(cands), maxDonors)] {
		d := layout.Donor{ID: s.id, Tokens: s.tape.Tokens(), Spans: s.tape.Spans(), Exact: s.tape.ExactTokens(s.tape.Len()), Dense: s.layout.Mode() == "dense"}
		if c := s.layout.DonorCopy(); c != nil {
			d.Copy = c
		} else {
			// Loading the donor's parked state, and saving and putting
			// back this session's: memory copies of both.
			d.CopySeconds = srv.slot.copyPerToken * float64(2*sess.tape.Len()+s.tape.Len())
			donor, version := s, s.version
			d.Copy = func(_ context.Context, ranges []policy.SpanRange) ([]layout.DonorPiece, bool, error) {
				return srv.slot.copyParked(sess, donor, version, ranges)
			}
		}
		out = append(out, d)
	}
	return append(out, srv.orphanDonors(sess, key)...)
}

// copyParked copies ranges of a dense donor's parked KV (tape index i at
// position i) while cur is resident: cur's KV is saved, the donor's parked
// state loaded, the ranges extracted, and cur's KV put back. The donor's
// tape and parked state are only read. lost: cur's KV could not be put
// back and the engine is empty. The caller holds the slot token.
func (s *slot) copyParked(cur, donor *session, version uint64, ranges []policy.SpanRange) ([]layout.DonorPiece, bool, error) {
	switch {
	case s.resident != cur:
		return nil, false, fmt.Errorf("%w: copying KV for session %d, which is not resident", protocol.ErrInternal, cur.id)
	case donor.closed || donor.version != version || donor.parked == nil || s.resident == donor:
		return nil, false, fmt.Errorf("%w: session %d changed or holds no parked KV", protocol.ErrInternal, donor.id)
	}
	for _, r := range ranges {
		if r.Start < 0 || r.End <= r.Start || r.End > donor.tape.Len() {
			return nil, false, fmt.Errorf("%w: range [%d,%d) outside session %d's %d tokens", protocol.ErrInternal, r.Start, r.End, donor.id, donor.tape.Len())
		}
	}
	start := time.Now()
	moved := 2*s.ectx.Used() + donor.tape.Len()
	defer func() {
		// A running estimate of a copy's cost per token moved.
		if moved > 0 {
			s.copyPerToken = policy.CopyCostEstimate(s.copyPerToken, time.Since(start).Seconds()/float64(moved))
		}
	}()
	var saved engine.SeqState
	own := s.ectx.Used() > 0
	if own {
		var err error
		if saved, err = s.ectx.SaveSeq(); err != nil {
			return nil, false, fmt.Errorf("%w: saving session %d: %w", protocol.ErrInternal, cur.id, err)
		}
	}
	cur.tape.LogitsLost()
	s.ectx.Clear()
	out, cerr := extractFrom(s.ectx, *donor.parked, ranges)
	s.ectx.Clear()
	if own {
		if err := s.ectx.LoadSeq(saved); err != nil {
			s.ectx.Clear()
			return nil, true, fmt.Errorf("%w: putting session %d back: %w", protocol.ErrInternal, cur.id, err)
		}
	}
	if cerr != nil {
		return nil, false, fmt.Errorf("%w: session %d's parked KV: %w", protocol.ErrInternal, donor.id, cerr)
	}
	return out, false, nil
}

// extractFrom loads st into the (empty) engine and extracts ranges.
func extractFrom(ectx engine.Context, st engine.SeqState, ranges []policy.SpanRange) ([]layout.DonorPiece, error) {
	if err := ectx.LoadSeq(st); err != nil {
		return nil, err
	}
	out := make([]layout.DonorPiece, 0, len(ranges))
	for i, r := range ranges {
		rg, err := ectx.ExtractRange(r.Start, r.End)
		if err != nil {
			return nil, err
		}
		out = append(out, layout.DonorPiece{Range: i, Src: r.Start, R: rg})
	}
	return out, nil
}
