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
	rep.ResidentTokens = int64(sess.tape.Len())
	rep.Restore = sess.lastRestore
	rep.LastPrefix = sess.lastPrefix
	if a := sess.tape.ApproxFrom(); a >= 0 {
		rep.ApproximateTokens = int64(sess.tape.Len() - a)
	}
	hotRanges := sess.layout.Explain(rep)
	for _, r := range hotRanges {
		if r[1] > r[0] {
			rep.HotRanges = append(rep.HotRanges, &pb.TokenRange{Start: int64(r[0]), End: int64(r[1])})
		}
	}
	for _, sp := range sess.tape.Spans() {
		n := int64(sp.End - sp.Start)
		if sp.Generated {
			rep.GeneratedTokens += n
		}
		class := sp.Seg.EffectiveClass()
		rep.TokensByClass[class.String()] += n
		rep.Segments = append(rep.Segments, &pb.SegmentResidency{
			Id: sp.Seg.ID, Kind: pb.SegmentKind(sp.Seg.Kind), Class: pb.CacheClass(class),
			Tokens: n, ResidentTokens: overlap(hotRanges, sp.Start, sp.End), FirstPosition: int64(sp.Start), Stable: sp.Seg.Stable,
		})
	}
	return rep
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
