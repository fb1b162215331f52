package client

import (
	"context"

	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// EditResult says what a ReportEdit invalidated.
type EditResult struct {
	Sessions      int      // sessions that held an invalidated segment
	Segments      []string // ids of the invalidated segments
	DroppedTokens int      // tokens removed from the KV
}

// ReportEdit tells the daemon that files changed: every segment of the
// session marked InvalidateOnEdit that lists one of paths is dropped from
// its KV, with everything after it, so the next EnsurePrefix prefills it
// again from the new text.
func (s *Session) ReportEdit(ctx context.Context, paths ...string) (EditResult, error) {
	return s.c.reportEdit(ctx, s.id, paths)
}

// ReportEdit is Session.ReportEdit for every session of this connection.
func (c *Client) ReportEdit(ctx context.Context, paths ...string) (EditResult, error) {
	return c.reportEdit(ctx, 0, paths)
}

func (c *Client) reportEdit(ctx context.Context, id uint64, paths []string) (EditResult, error) {
	r, err := c.do(ctx, &pb.Request{Body: &pb.Request_ReportEdit{ReportEdit: &pb.ReportEditRequest{SessionId: id, Paths: paths}}}, nil)
	if err != nil {
		return EditResult{}, err
	}
	e := r.GetReportEdit()
	return EditResult{Sessions: int(e.GetSessions()), Segments: e.GetSegments(), DroppedTokens: int(e.GetDroppedTokens())}, nil
}
