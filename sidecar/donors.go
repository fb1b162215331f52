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
// may copy KV from, and how a session's KV is copied out of what the slot
// parked (a dense tape, a hot set's open tail), without touching the
// session it belongs to.

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
		exact, tailFrom := s.layout.DonorFacts()
		d := layout.Donor{ID: s.id, Tokens: s.tape.Tokens(), Spans: s.tape.Spans(), Exact: exact, TailFrom: tailFrom}
		// Loading the donor's parked state, and saving and putting back
		// this session's: memory copies of both.
		donorUsed := 0
		if s.parked != nil {
			donorUsed = len(s.parked.Positions)
		}
		d.CopySeconds = srv.slot.copyPerToken * float64(2*srv.slot.ectx.Used()+donorUsed)
		donor, version := s, s.version
		ec := func(_ context.Context, positions []policy.SpanRange) ([]engine.Range, bool, error) {
			return srv.slot.copyParked(sess, donor, version, positions)
		}
		if c := s.layout.DonorCopy(ec); c != nil {
			d.Copy = c
		} else {
			d.Copy = func(ctx context.Context, ranges []policy.SpanRange) ([]layout.DonorPiece, bool, error) {
				// A dense tape: tape index i at position i.
				rs, lost, err := ec(ctx, ranges)
				if err != nil {
					return nil, lost, err
				}
				out := make([]layout.DonorPiece, len(rs))
				for i, r := range rs {
					out[i] = layout.DonorPiece{Range: i, Src: ranges[i].Start, R: r}
				}
				return out, false, nil
			}
		}
		out = append(out, d)
	}
	return append(out, srv.orphanDonors(sess, key)...)
}

// copyParked copies position ranges of a donor's parked KV while cur is
// resident: cur's KV is saved, the donor's parked state loaded, the ranges
// extracted, and cur's KV put back. The donor's tape and parked state are
// only read. lost: cur's KV could not be put back and the engine is
// empty. The caller holds the slot token.
func (s *slot) copyParked(cur, donor *session, version uint64, ranges []policy.SpanRange) ([]engine.Range, bool, error) {
	switch {
	case s.resident != cur:
		return nil, false, fmt.Errorf("%w: copying KV for session %d, which is not resident", protocol.ErrInternal, cur.id)
	case donor.closed || donor.version != version || donor.parked == nil || s.resident == donor:
		return nil, false, fmt.Errorf("%w: session %d changed or holds no parked KV", protocol.ErrInternal, donor.id)
	}
	for _, r := range ranges {
		if r.Start < 0 || r.End <= r.Start {
			return nil, false, fmt.Errorf("%w: range [%d,%d) of session %d's KV", protocol.ErrInternal, r.Start, r.End, donor.id)
		}
	}
	start := time.Now()
	moved := 2*s.ectx.Used() + len(donor.parked.Positions)
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
func extractFrom(ectx engine.Context, st engine.SeqState, ranges []policy.SpanRange) ([]engine.Range, error) {
	if err := ectx.LoadSeq(st); err != nil {
		return nil, err
	}
	out := make([]engine.Range, 0, len(ranges))
	for _, r := range ranges {
		rg, err := ectx.ExtractRange(r.Start, r.End)
		if err != nil {
			return nil, err
		}
		out = append(out, rg)
	}
	return out, nil
}
