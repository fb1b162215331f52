package httpapi

import "context"

// modelChanger is a backend that lets the door give its idle sessions
// back before the model is loaded or unloaded (*sidecar.Server): the
// door's sessions outlive its requests, and would otherwise hold the model
// slot (MODEL_BUSY) until ctxd restarts.
type modelChanger interface {
	OnModelChange(func(context.Context))
}

// closeIdle closes the sessions no request is using (the daemon snapshots
// them, so they resume later); sessions in use stay.
func (t *sessionTable) closeIdle(ctx context.Context) {
	t.mu.Lock()
	var idle []*liveSession
	for _, ls := range t.live {
		if ls.users == 0 {
			idle = append(idle, ls)
		}
	}
	for _, ls := range idle {
		t.removeLocked(ls)
	}
	t.mu.Unlock()
	for _, ls := range idle {
		t.closeSession(ctx, ls)
	}
	t.srv.models.forget()
}
