package sidecar

import (
	"context"

	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// explain reports what a session holds: tokens per segment and class, and
// the capacity figures. Session 0 means the most recently used session.
// Any connection of an allowed peer may ask; nothing is changed. It never
// waits for the engine: it reports the state the session's last call
// published (view.go), so it answers while a long call runs.
func (srv *Server) explain(ctx context.Context, r *pb.ExplainRequest) (*pb.ExplainReply, error) {
	sess, err := srv.anySession(r.GetSessionId())
	if err != nil {
		return nil, err
	}
	return srv.explainView(sess), ctx.Err()
}

// buildExplain describes sess without the capacity and SSD-tier figures
// (explainView adds them). The caller holds the slot token.
func (srv *Server) buildExplain(sess *session) *pb.ExplainReply {
	rep := &pb.ExplainReply{
		SessionId:     sess.id,
		TokensByClass: map[string]int64{},
		CompatKey:     sess.compat,
	}
	rep.ResidentTokens = int64(len(sess.tape))
	rep.Restore = sess.lastRestore
	hotRanges := sess.layout.explain(rep)
	for _, r := range hotRanges {
		if r[1] > r[0] {
			rep.HotRanges = append(rep.HotRanges, &pb.TokenRange{Start: int64(r[0]), End: int64(r[1])})
		}
	}
	for _, sp := range sess.spans {
		n := int64(sp.end - sp.start)
		if sp.generated {
			rep.GeneratedTokens += n
		}
		class := sp.seg.EffectiveClass()
		rep.TokensByClass[class.String()] += n
		rep.Segments = append(rep.Segments, &pb.SegmentResidency{
			Id: sp.seg.ID, Kind: pb.SegmentKind(sp.seg.Kind), Class: pb.CacheClass(class),
			Tokens: n, ResidentTokens: overlap(hotRanges, sp.start, sp.end), FirstPosition: int64(sp.start), Stable: sp.seg.Stable,
		})
	}
	return rep
}

// explain fills the hot-set figures and returns the tape ranges that are
// in the engine.
func (h *hotSet) explain(rep *pb.ExplainReply) [][2]int {
	sess := h.sess
	var ranges [][2]int
	for _, b := range h.blocks {
		switch {
		case b.res.inEngine():
			rep.HotTokens += int64(b.n)
			rep.HotBlocks++
			ranges = append(ranges, [2]int{b.vstart, b.vstart + b.n})
			if b.retrieved {
				rep.Retrieved = append(rep.Retrieved, &pb.RetrievedBlock{BlockId: b.id, FirstToken: int64(b.vstart), Tokens: int64(b.n), Score: b.score, Reason: b.reason})
			}
		case b.res == resParked:
			rep.ParkedTokens += int64(b.n)
			rep.ParkedBlocks++
		case b.res == resSpilled:
			rep.ColdTokens += int64(b.n)
			rep.ColdBlocks++
		default:
			rep.LostBlocks++
		}
	}
	tail := len(sess.tape) - h.tailV
	rep.HotTokens += int64(tail)
	ranges = append(ranges, [2]int{h.tailV, len(sess.tape)})
	if p := h.plan; p != nil {
		rep.ProtectedTokens, rep.RetrievedTokens = int64(p.ProtectedTokens), int64(p.RetrievedTokens)
	}
	if h.retrieval != nil {
		rep.LastRetrieval = h.retrieval.wire(h)
	}
	rep.Diagnostics = append(rep.Diagnostics, h.diag...)
	rep.Evictions, rep.Admissions = h.evictions, h.admissions
	return ranges
}

func overlap(ranges [][2]int, a, b int) int64 {
	var n int
	for _, r := range ranges {
		if lo, hi := max(a, r[0]), min(b, r[1]); lo < hi {
			n += hi - lo
		}
	}
	return int64(n)
}
