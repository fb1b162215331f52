package sidecar

import (
	"context"
	"fmt"
	"time"

	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar/internal/layout"
	"github.com/ctxd/ctxd/sidecar/internal/resume"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Snapshots and resume are package resume's (srv.snaps): this file wires
// the snapshot calls, automatic snapshots and resume to it, choosing which
// session it reaches and under which lock.

// snapsEnv is what the snapshot owner uses of the daemon.
func (srv *Server) snapsEnv() resume.Env {
	f := &srv.slot.fig
	return resume.Env{
		Log: srv.log, Tiers: srv.tiers, Observer: srv.metrics, AutoKeep: srv.cfg.AutoSnapshots,
		ElemBytes: tiers.ElemBytes(srv.cfg.KVType), Compat: srv.ssdCompat,
		Rates: func() (float64, float64, float64) { return f.readBPS, f.decompressBPS(), f.prefillTokensPerSec },
		ObserveRead: func(stored int64, d time.Duration) {
			f.readBPS = policy.ReadRateEstimate(f.readBPS, stored, d)
		},
		ClearEngine: func() { srv.slot.ectx.Clear() },
		Reuse:       srv.reuseSettings,
	}
}

// held is a session as the snapshot owner reaches it (resume.Session),
// under the slot token with the session resident.
type held struct {
	*session
	srv *Server
}

func (srv *Server) held(sess *session) held { return held{sess, srv} }

func (h held) ID() uint64                     { return h.id }
func (h held) Name() string                   { return h.name }
func (h held) Tape() resume.Tape              { return &h.tape }
func (h held) Layout() resume.Layout          { return h.layout }
func (h held) Manifest() *policy.Manifest     { return h.manifest }
func (h held) Reported(rep *pb.RestoreReport) { h.lastRestore = rep }

// Restored adopts a restored snapshot's manifest and its compatibility key.
func (h held) Restored(m *policy.Manifest, template string) {
	h.manifest, h.compat = m, h.srv.compatKey(template)
}

// snapshot serves SnapshotRequest. Session 0 names the most recently used
// session; any allowed peer may snapshot any session (nothing in it
// changes). Session state changes only under the slot token, so a call in
// flight on the session is simply waited for (it holds the token for its
// whole run) and the capture sees the state between two calls.
func (srv *Server) snapshot(ctx context.Context, r *pb.SnapshotRequest) (*pb.SnapshotReply, error) {
	return srv.snaps.Save(ctx, r.GetName(), func(ctx context.Context, f func(resume.Session) error) error {
		sess, err := srv.anySession(r.GetSessionId())
		if err != nil {
			return err
		}
		if err := srv.slot.acquire(ctx); err != nil {
			return fmt.Errorf("%w: waiting for the engine: %w", protocol.ErrCancelled, err)
		}
		defer srv.slot.release()
		if sess.closed {
			return fmt.Errorf("%w: session %d is closed", protocol.ErrNotFound, sess.id)
		}
		if srv.slot.model == nil {
			return protocol.ErrNoModel
		}
		if err := srv.slot.makeResident(sess); err != nil {
			return err
		}
		if err := f(srv.held(sess)); err != nil {
			return err
		}
		sess.savedVersion = sess.version
		return nil
	})
}

// restore serves RestoreRequest: the caller's session takes the
// snapshot's state.
func (srv *Server) restore(ctx context.Context, connID uint64, r *pb.RestoreRequest) (*pb.RestoreReply, error) {
	// Read before taking the engine: the published view names the model.
	v := srv.slot.view.Load()
	rep, err := srv.snaps.Restore(ctx, r.GetName(), v.compat, v.model != nil, func(ctx context.Context, f func(resume.Session) error) error {
		return srv.withSession(ctx, connID, r.GetSessionId(), func(sess *session) error { return f(srv.held(sess)) })
	})
	if err != nil {
		return nil, err
	}
	return &pb.RestoreReply{Report: rep}, nil
}

// resume brings a stored snapshot or an orphan tape into the empty
// session sess (resume.Owner.Resume); a session opened cold never
// resumes. The caller holds the slot token and sess is resident.
func (srv *Server) resume(ctx context.Context, sess *session, target layout.Prompt) (string, int) {
	if sess.ephemeral {
		return "", 0
	}
	return srv.snaps.Resume(ctx, srv.held(sess), target)
}

// listSnapshots serves ListSnapshotsRequest; it never waits for the engine.
func (srv *Server) listSnapshots(ctx context.Context) (*pb.ListSnapshotsReply, error) {
	return srv.snaps.List(ctx, srv.slot.view.Load().compat)
}

// verifyCold serves VerifyColdRequest.
func (srv *Server) verifyCold(ctx context.Context) (*pb.VerifyColdReply, error) {
	return srv.snaps.Verify(ctx)
}

// deleteSnapshot serves DeleteSnapshotRequest.
func (srv *Server) deleteSnapshot(ctx context.Context, name string) error {
	return srv.snaps.Delete(ctx, name)
}

// ssdStatus reports the SSD tier and the snapshots it holds.
func (srv *Server) ssdStatus() *pb.ColdStatus { return srv.snaps.Status() }

// autoSnapshot captures sess for an automatic snapshot when it changed
// since the last one; the commit continues in the background. The caller
// holds the slot token.
func (srv *Server) autoSnapshot(sess *session, why string) {
	if sess.closed || sess.ephemeral || sess.version == sess.savedVersion || !srv.snaps.AutoWanted(sess.tape.Len()) {
		return
	}
	if err := srv.slot.makeResident(sess); err != nil {
		return
	}
	if srv.snaps.AutoSave(srv.held(sess), why) {
		sess.savedVersion = sess.version
	}
}

// idleSnapshots saves sessions idle for IdleSnapshot until ctx ends.
func (srv *Server) idleSnapshots(ctx context.Context) {
	idle := srv.cfg.IdleSnapshot
	if !srv.snaps.On() || idle <= 0 {
		return
	}
	t := time.NewTicker(max(idle/4, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		srv.mu.Lock()
		var due []*session
		for _, s := range srv.sessions {
			due = append(due, s)
		}
		srv.mu.Unlock()
		for _, sess := range due {
			srv.mu.Lock()
			idleFor := time.Since(sess.lastUsed)
			srv.mu.Unlock()
			if idleFor < idle {
				continue
			}
			// Only when the engine is free: never delay a client's call.
			if !srv.slot.token.tryAcquire() {
				continue
			}
			if srv.slot.model != nil {
				srv.autoSnapshot(sess, "idle")
			}
			srv.slot.release()
		}
	}
}
