package sidecar

import (
	"context"

	"github.com/ctxd/ctxd/policy"
)

// SetScorers changes which scorers rank parked blocks from the next turn
// on, for every session (an evaluation knob: ctxbench eval recall asks the
// same haystack with each scorer). It waits for the engine.
func (srv *Server) SetScorers(ctx context.Context, s policy.ScorerSet) error {
	if err := srv.slot.acquire(ctx); err != nil {
		return err
	}
	defer srv.slot.release()
	if err := checkScorers(s, srv.slot.ectx); err != nil {
		return err
	}
	srv.cfg.Scorers = s.String()
	srv.slot.hot.Scorers = s // sessions' layouts read the slot's settings
	return nil
}
