package layout

import (
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// Explain fills the hot-set figures and returns the tape ranges that are
// in the engine.
func (h *hotSet) Explain(rep *pb.ExplainReply) [][2]int {
	tape := h.tape
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
	tail := len(tape.tokens) - h.tailV
	rep.HotTokens += int64(tail)
	ranges = append(ranges, [2]int{h.tailV, len(tape.tokens)})
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
