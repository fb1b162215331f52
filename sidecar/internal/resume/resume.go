package resume

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

// Resume looks for the orphan tape or stored snapshot sharing the longest
// token prefix with target and brings it into the empty session s. It
// returns the source's name ("arena" for an orphan tape) and the tokens
// that came back, or "" when none fits. The caller holds the engine token,
// s is resident and may be resumed (not opened cold).
func (o *Owner) Resume(ctx context.Context, s Session, target []engine.Token) (string, int) {
	l, t := s.Layout(), s.Tape()
	if t.Len() > 0 {
		return "", 0
	}
	// policy.ChooseResume picks the source; resume stops at target's own
	// tokens (choice.Tokens), whatever the source holds past them.
	in := policy.ResumeInput{TargetTokens: len(target), MinTokens: snapshot.MinAutoTokens, Arena: l.OrphanPrefixes(target)}
	var snaps []*snapshot.Entry
	if o.On() {
		snaps = o.store.Candidates(o.env.Compat(), l.Mode())
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
		n, blocks, err := l.AdoptOrphan(oi, on)
		if err != nil {
			o.log.Warn("resume from the arena failed; prefilling instead", "err", err)
			o.clearOrReset(s)
			return "", 0
		}
		s.Reported(&pb.RestoreReport{Snapshot: "arena", Tokens: int64(n), RestoredTokens: int64(n), RestoredBlocks: int64(blocks),
			Automatic: true, Choice: "resume from parked blocks still in the host-RAM arena (no SSD read, no prefill)"})
		o.log.Info("session resumed from the arena", "session", s.ID(), "common_tokens", on, "tokens", n)
		return "arena", min(on, n)
	case policy.ResumeSnapshot:
	default:
		return "", 0
	}
	best, bestN := snaps[choice.Index], choice.Tokens
	snap, meta, err := o.store.Load(ctx, best.Name, o.env.Compat(), true)
	if err != nil {
		o.log.Warn("resume: snapshot unusable", "name", best.Name, "err", err)
		return "", 0
	}
	tape, err := snapshot.DecodeTape(meta.Tape)
	if err != nil {
		return "", 0
	}
	rep, err := o.restoreInto(ctx, s, snap, meta, tape, bestN)
	if err == nil {
		// The snapshot may go on past target (tokens its session
		// generated, or another suffix): resume only the common prefix.
		_, err = l.Cut(bestN)
		rep.Tokens = int64(t.Len())
	}
	if err != nil {
		o.log.Warn("resume failed; prefilling instead", "name", best.Name, "err", err)
		o.clearOrReset(s)
		return "", 0
	}
	rep.Automatic = true
	o.log.Info("session resumed from snapshot", "session", s.ID(), "snapshot", best.Name, "common_tokens", bestN, "restored_tokens", rep.RestoredTokens, "ms", rep.ElapsedUs/1000)
	return best.Name, min(bestN, t.Len())
}

// clearOrReset clears s after a failed resume; a failure to clear is
// logged and the engine and the session's state reset, so the next sync
// prefills.
func (o *Owner) clearOrReset(s Session) {
	if err := s.Layout().Clear(); err != nil {
		o.log.Warn("clearing a session after a failed resume", "session", s.ID(), "err", err)
		o.env.ClearEngine()
		s.Layout().Reset()
	}
}
