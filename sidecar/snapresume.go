package sidecar

import (
	"context"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar/internal/layout"
	"github.com/ctxd/ctxd/sidecar/internal/snapshot"
)

// Cross-session resume: an empty session whose prompt starts like an
// orphan tape in the arena (layout/adopt.go) or a stored snapshot takes that
// KV instead of prefilling it, and keeps only the tokens its own prompt
// shares with it.

// resume looks for the orphan tape or stored snapshot sharing the longest
// token prefix with target and brings it into the empty session sess. It
// returns the source's name ("arena" for an orphan tape) and the tokens
// that came back, or "" when none fits. The caller holds the slot token
// and sess is resident.
func (srv *Server) resume(ctx context.Context, sess *session, target []engine.Token) (string, int) {
	if sess.ephemeral || sess.tape.Len() > 0 {
		return "", 0
	}
	// policy.ChooseResume picks the source; resume stops at target's own
	// tokens (choice.Tokens), whatever the source holds past them.
	in := policy.ResumeInput{TargetTokens: len(target), MinTokens: snapshot.MinAutoTokens, Arena: sess.layout.OrphanPrefixes(target)}
	var snaps []*snapshot.Entry
	if srv.snaps.On() {
		snaps = srv.snaps.Candidates(srv.ssdCompat(), sess.layout.Mode())
		for _, e := range snaps {
			in.Snapshots = append(in.Snapshots, policy.ResumeCandidate{CommonTokens: layout.CommonPrefix(e.Tape, target), Created: e.Created.UnixNano()})
		}
	}
	choice := policy.ChooseResume(in)
	switch choice.Source {
	case policy.ResumeArena:
		// Blocks still in host RAM beat the SSD. The orphan may go on
		// past target (tokens its session generated): keep only what
		// target shares with it.
		oi, on := choice.Index, choice.Tokens
		n, blocks, err := sess.layout.AdoptOrphan(oi, on)
		if err != nil {
			srv.log.Warn("resume from the arena failed; prefilling instead", "err", err)
			srv.clearOrReset(sess)
			return "", 0
		}
		sess.lastRestore = &pb.RestoreReport{Snapshot: "arena", Tokens: int64(n), RestoredTokens: int64(n), RestoredBlocks: int64(blocks),
			Automatic: true, Choice: "resume from parked blocks still in the host-RAM arena (no SSD read, no prefill)"}
		srv.log.Info("session resumed from the arena", "session", sess.id, "common_tokens", on, "tokens", n)
		return "arena", min(on, n)
	case policy.ResumeSnapshot:
	default:
		return "", 0
	}
	best, bestN := snaps[choice.Index], choice.Tokens
	snap, meta, err := srv.snaps.Load(ctx, best.Name, srv.ssdCompat(), srv.slot.model != nil)
	if err != nil {
		srv.log.Warn("resume: snapshot unusable", "name", best.Name, "err", err)
		return "", 0
	}
	tape, err := snapshot.DecodeTape(meta.Tape)
	if err != nil {
		return "", 0
	}
	rep, err := srv.restoreInto(ctx, sess, snap, meta, tape, bestN)
	if err == nil {
		// The snapshot may go on past target (tokens its session
		// generated, or another suffix): resume only the common prefix.
		_, err = sess.layout.Cut(ctx, bestN)
		rep.Tokens = int64(sess.tape.Len())
	}
	if err != nil {
		srv.log.Warn("resume failed; prefilling instead", "name", best.Name, "err", err)
		srv.clearOrReset(sess)
		return "", 0
	}
	rep.Automatic = true
	srv.log.Info("session resumed from snapshot", "session", sess.id, "snapshot", best.Name, "common_tokens", bestN, "restored_tokens", rep.RestoredTokens, "ms", rep.ElapsedUs/1000)
	return best.Name, min(bestN, sess.tape.Len())
}

// clearOrReset clears sess after a failed resume; a failure to clear is
// logged and the engine and the session's state reset, so the next sync
// prefills.
func (srv *Server) clearOrReset(sess *session) {
	if err := sess.layout.Clear(); err != nil {
		srv.log.Warn("clearing a session after a failed resume", "session", sess.id, "err", err)
		srv.slot.ectx.Clear()
		sess.layout.Reset()
	}
}
