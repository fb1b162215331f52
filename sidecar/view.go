package sidecar

import (
	"google.golang.org/protobuf/proto"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// Published views: what Status, Explain, ListSnapshots and Summary read
// instead of waiting for the engine token. Whoever changes the state
// publishes a fresh, immutable view under the token (a model load or
// unload; a session's call as it ends or yields); readers load it
// atomically and never block behind a long call.

// slotView is the loaded model as readers see it.
type slotView struct {
	model    *pb.ModelInfo // nil: no model loaded
	capacity *pb.Capacity
	device   *pb.DeviceInfo   // where the model runs (Status)
	threads  threadsReporter  // the context's CPU threads, read live (nil: none)
	compat   coldstore.Compat // the SSD tier's key for this model
	facts    engine.Facts     // the engine's facts of the model
}

// publishSlot records the slot's model for readers; the caller holds the
// token.
func (srv *Server) publishSlot() {
	v := &slotView{}
	if srv.slot.model != nil {
		v.model, v.capacity, v.device, v.compat = srv.modelInfo(), srv.capacityReply(), srv.deviceInfo(), srv.ssdCompat()
		v.facts = srv.slot.facts
		if t, ok := srv.slot.ectx.(threadsReporter); ok {
			v.threads = t
		}
	}
	srv.slot.view.Store(v)
}

// publishSession records what Explain reports of sess; the caller holds
// the token.
func (srv *Server) publishSession(sess *session) {
	sess.explained.Store(srv.buildExplain(sess))
}

// explainView is sess's published Explain with the current capacity and
// SSD-tier figures.
func (srv *Server) explainView(sess *session) *pb.ExplainReply {
	rep := &pb.ExplainReply{SessionId: sess.id, TokensByClass: map[string]int64{}}
	if p := sess.explained.Load(); p != nil {
		rep = proto.Clone(p).(*pb.ExplainReply)
	}
	rep.Capacity = srv.slot.view.Load().capacity
	rep.Cold = srv.ssdStatus()
	return rep
}
