package sidecar

import (
	"context"
	"fmt"

	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// explain reports what a session holds: tokens per segment and class, and
// the capacity figures. Session 0 means the most recently used session.
// Any connection of an allowed peer may ask; nothing is changed.
func (srv *Server) explain(ctx context.Context, r *pb.ExplainRequest) (*pb.ExplainReply, error) {
	id := r.GetSessionId()
	srv.mu.Lock()
	if id == 0 {
		id = srv.lastSession
	}
	sess, ok := srv.sessions[id]
	srv.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: session %d", protocol.ErrNotFound, id)
	}
	if err := srv.slot.acquire(ctx); err != nil {
		return nil, err
	}
	defer srv.slot.release()
	rep := &pb.ExplainReply{
		SessionId:     sess.id,
		TokensByClass: map[string]int64{},
		CompatKey:     sess.compat,
	}
	if srv.slot.model != nil {
		rep.Capacity = capacityToWire(srv.slot.capacity)
	}
	rep.ResidentTokens = int64(len(sess.tape))
	for _, sp := range sess.spans {
		n := int64(sp.end - sp.start)
		if sp.generated {
			rep.GeneratedTokens += n
		}
		class := sp.seg.EffectiveClass()
		rep.TokensByClass[class.String()] += n
		rep.Segments = append(rep.Segments, &pb.SegmentResidency{
			Id: sp.seg.ID, Kind: pb.SegmentKind(sp.seg.Kind), Class: pb.CacheClass(class),
			Tokens: n, ResidentTokens: n, FirstPosition: int64(sp.start), Stable: sp.seg.Stable,
		})
	}
	return rep, nil
}
