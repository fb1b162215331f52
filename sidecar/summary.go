package sidecar

// Summary is a glance at a Server for service managers and health checks.
type Summary struct {
	Sessions    int    // open sessions
	Connections int    // connected clients
	Model       string // path of the loaded model; "" when none or EngineBusy
	EngineBusy  bool   // a call held the engine, so Model was not read
}

// Summary reports the server's state without waiting for the engine: while
// a call holds the engine it leaves Model empty and sets EngineBusy. It
// takes the server's own lock only briefly, so a Summary that does not
// return means the server is wedged.
func (srv *Server) Summary() Summary {
	srv.mu.Lock()
	s := Summary{Sessions: len(srv.sessions), Connections: len(srv.conns)}
	srv.mu.Unlock()
	select {
	case <-srv.slot.token:
		if srv.slot.model != nil {
			s.Model = srv.slot.facts.Path
		}
		srv.slot.release()
	default:
		s.EngineBusy = true
	}
	return s
}
