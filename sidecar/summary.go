package sidecar

// Summary is a glance at a Server for service managers and health checks.
type Summary struct {
	Sessions    int    // open sessions
	Connections int    // connected clients
	Model       string // path of the loaded model; "" when none
	EngineBusy  bool   // a call holds the engine
}

// Summary reports the server's state without waiting for the engine: the
// model is the one published at its load, and EngineBusy says whether a
// call holds the engine now. It takes the server's own lock only briefly,
// so a Summary that does not return means the server is wedged.
func (srv *Server) Summary() Summary {
	srv.mu.Lock()
	s := Summary{Sessions: len(srv.sessions), Connections: len(srv.conns)}
	srv.mu.Unlock()
	if m := srv.slot.view.Load().model; m != nil {
		s.Model = m.GetPath()
	}
	s.EngineBusy = srv.slot.token.busy()
	return s
}
