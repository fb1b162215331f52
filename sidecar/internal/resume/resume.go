package resume

import (
	"context"
	"fmt"

	"github.com/ctxd/ctxd/policy"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar/internal/layout"
	"github.com/ctxd/ctxd/sidecar/internal/snapshot"
)

// Cross-session resume: an empty session whose prompt starts like an
// orphan tape in the arena (layout/adopt.go) or a stored snapshot takes that
// KV instead of prefilling it, and keeps only the tokens its own prompt
// shares with it: the common prefix, and past the first change a
// snapshot's segments equal to the prompt's, which the next sync moves.

// Resume looks for the orphan tape or stored snapshot sharing the most
// with target and brings it into the empty session s: its longest common
// token prefix, exactly, and, unless the daemon or target asks for exact
// reuse, a snapshot's unchanged segments past the first change
// (policy.PlanResume), which the sync that follows moves into place as it
// would in a live session. It returns the source's name
// ("arena" for an orphan tape) and the exact tokens that came back, or ""
// when none fits. The caller holds the engine token, s is resident and may
// be resumed (not opened cold).
func (o *Owner) Resume(ctx context.Context, s Session, target layout.Prompt) (string, int) {
	l, t := s.Layout(), s.Tape()
	if t.Len() > 0 {
		return "", 0
	}
	// policy.PlanResume picks the source; resume stops at target's own
	// tokens (plan.Tokens), whatever the source holds past them, or at the
	// end of the last unchanged segment it brings back (plan.Upto).
	in := policy.ResumeInput{TargetTokens: len(target.Tokens), MinTokens: snapshot.MinAutoTokens, Arena: l.OrphanPrefixes(target.Tokens)}
	if o.env.Reuse != nil && !target.Exact {
		set := o.env.Reuse()
		in.Reuse = &policy.ResumeReuse{Mode: set.Mode, Cost: set.Cost, LatencySeconds: set.LatencySeconds}
	}
	if in.Reuse != nil {
		in.ArenaRuns = o.orphanRuns(target, in.Arena)
	}
	var snaps []*snapshot.Entry
	if o.On() {
		snaps = o.store.Candidates(o.env.Compat(), l.Mode())
		spans := layout.SpanRanges(target.Spans)
		for _, e := range snaps {
			common := layout.CommonPrefix(e.Tape, target.Tokens)
			in.Snapshots = append(in.Snapshots, policy.ResumeCandidate{CommonTokens: common, Created: e.Created.UnixNano()})
			var runs []policy.ReuseRun
			if in.Reuse != nil && common < len(target.Tokens) {
				runs = policy.MatchSegments(e.Tape, e.Spans, target.Tokens, spans, common)
			}
			in.SnapshotRuns = append(in.SnapshotRuns, runs)
		}
	}
	plan := policy.PlanResume(in)
	switch plan.Source {
	case policy.ResumeArena:
		// Blocks still in host RAM beat the SSD. How much of the orphan
		// is kept (policy.AdoptionExtent): past the first change all it
		// holds, its open tail included — the sync moves its unchanged
		// segments into place and keeps what follows them behind the
		// new prefix; else its common prefix with target, the tail's
		// included when the prompt goes on as the tail did.
		oi := plan.Index
		tp := o.env.Tiers.Orphans()[oi]
		held := tp.AllTokens()
		upto, on := policy.AdoptionExtent(plan, len(tp.Tokens), len(held), layout.CommonPrefix(held, target.Tokens))
		n, blocks, err := l.AdoptOrphan(oi, upto)
		if err != nil {
			o.log.Warn("resume from the arena failed; prefilling instead", "err", err)
			o.clearOrReset(s)
			return "", 0
		}
		choice := "resume from parked blocks still in the host-RAM arena (no SSD read, no prefill)"
		if plan.Upto > on {
			choice = fmt.Sprintf("%s; past the first change at token %d, unchanged segments up to token %d and what follows them kept to be moved into place: %s",
				choice, on, plan.Upto, plan.Choice)
		}
		s.Reported(&pb.RestoreReport{Snapshot: "arena", Tokens: int64(n), RestoredTokens: int64(n), RestoredBlocks: int64(blocks),
			Automatic: true, Choice: choice})
		o.log.Info("session resumed from the arena", "session", s.ID(), "common_tokens", on, "segments_up_to", plan.Upto,
			"approximate_tokens", plan.Approximate, "tokens", n)
		return "arena", min(on, n)
	case policy.ResumeSnapshot:
	default:
		return "", 0
	}
	best, bestN := snaps[plan.Index], plan.Tokens
	snap, meta, err := o.store.Load(ctx, best.Name, o.env.Compat(), true)
	if err != nil {
		o.log.Warn("resume: snapshot unusable", "name", best.Name, "err", err)
		return "", 0
	}
	tape, err := snapshot.DecodeTape(meta.Tape)
	if err != nil {
		return "", 0
	}
	rep, err := o.restoreInto(ctx, s, snap, meta, tape, bestN, plan.Upto)
	if err == nil {
		// The snapshot may go on past target (tokens its session
		// generated, or another suffix): resume only the common prefix,
		// and the unchanged segments past the first change, if any (a
		// hot set keeps the head of the block the cut falls in).
		_, err = l.Cut(ctx, plan.Upto)
		rep.Tokens = int64(t.Len())
	}
	if err != nil {
		o.log.Warn("resume failed; prefilling instead", "name", best.Name, "err", err)
		o.clearOrReset(s)
		return "", 0
	}
	rep.Automatic = true
	if plan.Upto > bestN {
		rep.Choice = fmt.Sprintf("%s; past the first change at token %d, unchanged segments up to token %d brought back to be moved into place: %s",
			rep.Choice, bestN, plan.Upto, plan.Choice)
	}
	o.log.Info("session resumed from snapshot", "session", s.ID(), "snapshot", best.Name, "common_tokens", bestN,
		"segments_up_to", plan.Upto, "approximate_tokens", plan.Approximate, "restored_tokens", rep.RestoredTokens, "ms", rep.ElapsedUs/1000)
	return best.Name, min(bestN, t.Len())
}

// orphanRuns are, per orphan tape (common: the tokens each shares with
// target), its whole segments past that prefix whose tokens equal
// segments of target, by the spans recorded with its blocks, its open
// tail's included (tiers/orphantail.go: the tail counts past the first
// change only, never in the common prefix, so a snapshot holding the
// same tail and its turn's layout still wins a tie); none for a tape
// without spans or built under another compatibility key.
func (o *Owner) orphanRuns(target layout.Prompt, common []int) [][]policy.ReuseRun {
	if len(common) == 0 || o.env.Tiers == nil {
		return nil
	}
	orphans := o.env.Tiers.Orphans()
	spans := layout.SpanRanges(target.Spans)
	out := make([][]policy.ReuseRun, len(common))
	for i, n := range common {
		if i < len(orphans) && len(orphans[i].Spans) > 0 && orphans[i].Compat == target.Compat && n < len(target.Tokens) {
			out[i] = policy.MatchSegments(orphans[i].AllTokens(), orphans[i].SpanRanges(), target.Tokens, spans, n)
		}
	}
	return out
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
