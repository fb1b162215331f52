package sidecar

import (
	"context"
	"fmt"

	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar/internal/layout"
)

// Invalidation hints. A segment marked invalidate_on_edit names the files
// it was built from: when the client reports one of them edited, the
// segment's KV is stale, and so is everything after it (it attended to the
// old text), so the session's tape is cut at the segment's first token. A
// segment marked invalidate_on_turn lives for one turn: once a turn ends
// (a Decode completes), the next sync reuses nothing from that segment on.

// reportEdit serves ReportEditRequest.
func (srv *Server) reportEdit(ctx context.Context, connID uint64, r *pb.ReportEditRequest) (*pb.ReportEditReply, error) {
	if len(r.GetPaths()) == 0 {
		return nil, fmt.Errorf("%w: report_edit needs at least one path", protocol.ErrInvalidArgument)
	}
	var ids []uint64
	if id := r.GetSessionId(); id != 0 {
		ids = []uint64{id}
	} else {
		srv.mu.Lock()
		for id, s := range srv.sessions {
			if connID == 0 || s.connID == connID {
				ids = append(ids, id)
			}
		}
		srv.mu.Unlock()
	}
	rep := &pb.ReportEditReply{}
	for _, id := range ids {
		err := srv.withSession(ctx, connID, id, func(sess *session) error {
			cut, segs := editCut(sess.tape.Spans(), r.GetPaths())
			if cut < 0 {
				return nil
			}
			before := sess.tape.Len()
			if _, err := sess.layout.Cut(ctx, cut); err != nil {
				return err
			}
			rep.Sessions++
			rep.Segments = append(rep.Segments, segs...)
			rep.DroppedTokens += int64(before - sess.tape.Len())
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// editCut is the first tape index of a segment invalidated by editing one
// of paths (-1: none), and the ids of every such segment.
func editCut(spans []layout.Span, paths []string) (int, []string) {
	cut := -1
	var ids []string
	for _, sp := range spans {
		for _, p := range paths {
			if policy.EditInvalidates(sp.Seg, p) {
				if cut < 0 || sp.Start < cut {
					cut = sp.Start
				}
				ids = append(ids, sp.Seg.ID)
				break
			}
		}
	}
	return cut, ids
}
