package sidecar

import (
	"context"
	"fmt"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
)

// In-process callers (an adapter such as the HTTP door) drive the daemon
// through Handle like any connection; these few calls serve what the wire
// protocol has no request for.

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

// ModelFacts are the engine's facts of the loaded model (its chat
// template among them), read from the published view without waiting for
// the engine; false when no model is loaded.
func (srv *Server) ModelFacts() (engine.Facts, bool) {
	v := srv.slot.view.Load()
	if v.model == nil {
		return engine.Facts{}, false
	}
	return v.facts, true
}

// CountTokens is how many tokens m's segments take with the loaded model,
// BOS included when the model adds one: the prompt tokens a turn with m
// would hold, with nothing prefilled and no session touched. In-process
// callers (the HTTP door's count_tokens) use it; it waits for the engine
// like any call, since tokenizing needs the loaded model.
func (srv *Server) CountTokens(ctx context.Context, m policy.Manifest) (int, error) {
	if err := m.Validate(); err != nil {
		return 0, fmt.Errorf("%w: %w", protocol.ErrInvalidManifest, err)
	}
	if err := srv.slot.acquire(ctx); err != nil {
		return 0, fmt.Errorf("%w: waiting for the engine: %w", protocol.ErrCancelled, err)
	}
	defer srv.slot.release()
	if srv.slot.model == nil {
		return 0, protocol.ErrNoModel
	}
	n := 0
	if srv.slot.facts.AddBOS {
		n++
	}
	for _, seg := range m.Segments {
		if len(seg.Tokens) > 0 {
			n += len(seg.Tokens)
			continue
		}
		toks, err := tokenizeSegment(srv.slot.model, seg)
		if err != nil {
			return 0, fmt.Errorf("%w: segment %q: %w", protocol.ErrInvalidManifest, seg.ID, err)
		}
		n += len(toks)
	}
	return n, nil
}
