package sidecar

import (
	"context"
	"fmt"

	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
)

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
