package sidecar

// NewConnID reserves a connection id for an in-process caller of Handle
// (an adapter such as the HTTP door) that wants session ownership of its
// own: sessions it opens under the id are its alone, as if they belonged
// to a connection, but nothing closes them for it. It calls CloseSession
// for each when done; Close frees whatever is left.
func (srv *Server) NewConnID() uint64 {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	srv.nextConn++
	return srv.nextConn
}
