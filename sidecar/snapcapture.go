package sidecar

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/protocol"
	"github.com/ctxd/ctxd/sidecar/internal/snapshot"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Capture: a session's state copied out under the slot token into a
// snapshot.Capture. Only memory copies happen here; the rewrite for
// compression, hashing and the writes wait for snapshot.Store.Commit,
// after the engine is released.

// capture copies sess out. The caller holds the slot token and sess is
// resident.
func (srv *Server) capture(sess *session, name string) (*snapshot.Capture, error) {
	tape := append([]engine.Token(nil), sess.tape.Tokens()...)
	c := snapshot.NewCapture(name, srv.ssdCompat(), tape, tiers.ElemBytes(srv.cfg.KVType))
	meta := snapshot.Meta{Format: snapshot.Format, Session: sess.name, Tape: snapshot.EncodeTape(tape), Mode: sess.layout.Mode()}
	if a := sess.tape.ApproxFrom(); a >= 0 {
		meta.ApproxFrom = &a
	}
	if sess.manifest != nil {
		meta.Template = sess.manifest.Template
		m, err := proto.Marshal(protocol.ManifestToWire(*sess.manifest))
		if err != nil {
			return nil, fmt.Errorf("%w: encoding the manifest: %w", protocol.ErrInternal, err)
		}
		c.Snap.Manifest = m
	}
	for _, sp := range sess.tape.Spans() {
		meta.Spans = append(meta.Spans, snapshot.Span{Seg: sp.Seg, Start: sp.Start, End: sp.End, Generated: sp.Generated})
	}
	if err := sess.layout.Capture(c, &meta); err != nil {
		return nil, err
	}
	c.Mode = meta.Mode
	mb, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding snapshot metadata: %w", protocol.ErrInternal, err)
	}
	c.Snap.Meta = mb
	// The saved state continues from recomputed logits, as a restore does,
	// so the two continue identically.
	sess.tape.LogitsLost()
	return c, nil
}

// captureSession takes the slot, makes the session resident and captures
// it. Session state changes only under the slot token, so a call in
// flight on the session is simply waited for (it holds the token for its
// whole run) and the capture sees the state between two calls.
func (srv *Server) captureSession(ctx context.Context, sess *session, name string) (*snapshot.Capture, error) {
	if err := srv.slot.acquire(ctx); err != nil {
		return nil, fmt.Errorf("%w: waiting for the engine: %w", protocol.ErrCancelled, err)
	}
	defer srv.slot.release()
	if sess.closed {
		return nil, fmt.Errorf("%w: session %d is closed", protocol.ErrNotFound, sess.id)
	}
	if srv.slot.model == nil {
		return nil, protocol.ErrNoModel
	}
	if err := srv.slot.makeResident(sess); err != nil {
		return nil, err
	}
	c, err := srv.capture(sess, name)
	if err == nil {
		sess.savedVersion = sess.version
	}
	return c, err
}
