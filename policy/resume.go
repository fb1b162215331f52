package policy

// ResumeSource is where a new session's KV comes from instead of prefill.
type ResumeSource int

// Resume sources.
const (
	ResumeNone     ResumeSource = iota // prefill: nothing shares enough
	ResumeArena                        // parked blocks still in host RAM (an orphan tape)
	ResumeSnapshot                     // a stored snapshot on the SSD tier
)

var resumeSourceNames = [...]string{ResumeNone: "none", ResumeArena: "arena", ResumeSnapshot: "snapshot"}

// String returns the source's name, e.g. "arena".
func (s ResumeSource) String() string {
	if s >= ResumeNone && s <= ResumeSnapshot {
		return resumeSourceNames[s]
	}
	return "ResumeSource(?)"
}

// ResumeCandidate is a stored snapshot a session could resume from.
type ResumeCandidate struct {
	// CommonTokens is the length of the token prefix it shares with the
	// session's target.
	CommonTokens int
	// Created orders snapshots sharing as much: the newer (larger) wins.
	Created int64
}

// ResumeInput is what ChooseResume weighs.
type ResumeInput struct {
	// TargetTokens is the length of the tokens the session's manifest
	// itself describes: resume never goes past them.
	TargetTokens int
	// MinTokens is the least a resume must bring back to be worth it.
	MinTokens int
	// Arena holds, per orphan tape in host RAM (oldest first), the tokens
	// it shares with the target; empty when the session cannot adopt one.
	Arena []int
	// Snapshots are the compatible stored snapshots; empty when the SSD
	// tier is off.
	Snapshots []ResumeCandidate
	// SnapshotRuns are, per snapshot (parallel to Snapshots; missing:
	// none), its whole segments past the common prefix whose tokens equal
	// segments of the target (MatchSegments from CommonTokens): what
	// PlanResume may bring back to be moved into place.
	SnapshotRuns [][]ReuseRun
	// ArenaRuns are the same per orphan tape (parallel to Arena), from the
	// segment spans recorded with its blocks.
	ArenaRuns [][]ReuseRun
	// Reuse says how a resume may reuse past the first change; nil:
	// never (a layout that moves no segments, a request asking exact).
	Reuse *ResumeReuse
}

// ResumeReuse is the segment-reuse mode and figures a resume past the
// first change is planned with: the same as a live session's
// (PlanSegmentReuse), so a resumed session reuses what it would have
// reused had it stayed open.
type ResumeReuse struct {
	Mode           ReuseMode
	Cost           PrefillCost
	LatencySeconds float64
}

// ResumeChoice is the outcome of ChooseResume.
type ResumeChoice struct {
	Source ResumeSource
	// Index is the chosen entry of ResumeInput.Arena or .Snapshots.
	Index int
	// Tokens is how many tokens the session keeps after resuming: the
	// common prefix, never more than TargetTokens (what the source holds
	// past it, e.g. tokens another session generated, is dropped).
	Tokens int
}

// ChooseResume picks what a new session resumes from. The candidate of each
// kind is the one sharing the longest prefix with the target (the first
// orphan tape, the newest snapshot, then the first, on ties). Host RAM wins
// when it shares at least as much as the best snapshot, since it needs no
// SSD read; either needs MinTokens in common. A target shorter than
// MinTokens resumes from nothing.
func ChooseResume(in ResumeInput) ResumeChoice {
	if in.TargetTokens < in.MinTokens {
		return ResumeChoice{Source: ResumeNone}
	}
	oi, on := -1, 0
	for i, n := range in.Arena {
		if n > on {
			oi, on = i, n
		}
	}
	si, sn := -1, 0
	for i, s := range in.Snapshots {
		if s.CommonTokens > sn || (s.CommonTokens == sn && si >= 0 && s.Created > in.Snapshots[si].Created) {
			si, sn = i, s.CommonTokens
		}
	}
	switch {
	case oi >= 0 && on >= in.MinTokens && on >= sn:
		return ResumeChoice{Source: ResumeArena, Index: oi, Tokens: min(on, in.TargetTokens)}
	case si >= 0 && sn >= in.MinTokens:
		return ResumeChoice{Source: ResumeSnapshot, Index: si, Tokens: min(sn, in.TargetTokens)}
	}
	return ResumeChoice{Source: ResumeNone}
}

// ResumePlan is PlanResume's outcome.
type ResumePlan struct {
	ResumeChoice
	// Upto is how many tokens of the source come back: Tokens (its common
	// prefix with the target, exact), or, for a source whose unchanged
	// segments past the first change are worth moving, up to the end of
	// the last of them. What lies between (the source's changed tokens)
	// is dropped by the sync that moves the segments.
	Upto int
	// Approximate are the tokens segment reuse would move into place
	// (their KV approximate), Recomputed those of matched segments it
	// would prefill again; both 0 when Upto is Tokens.
	Approximate, Recomputed int
	// Choice says why, for the restore report.
	Choice string
}

// PlanResume is ChooseResume extended past the first change: a snapshot
// or an orphan tape (one sharing at least MinTokens of prefix: a tape
// sharing less is left to lend its segments as a donor, to this session
// and others) that shares less prefix but whose later segments
// equal the target's is worth its common prefix (exact) plus the tokens
// PlanSegmentReuse would move (approximate), planned with Reuse's mode,
// cost and latency target exactly as a live session's turn is. The best
// source by that worth (then by exact tokens; on a tie an orphan tape
// before a snapshot, as it needs no SSD read, then the newest snapshot)
// is taken over ChooseResume's choice when it moves something, is worth
// more than that choice, and at least MinTokens. Without Reuse, in exact
// mode, or when no segment would be moved, it is ChooseResume's choice
// with Upto = Tokens.
func PlanResume(in ResumeInput) ResumePlan {
	base := ChooseResume(in)
	plan := ResumePlan{ResumeChoice: base, Upto: base.Tokens}
	if in.Reuse == nil || in.Reuse.Mode == ReuseExact || in.TargetTokens < in.MinTokens {
		return plan
	}
	best := ResumePlan{ResumeChoice: ResumeChoice{Source: ResumeNone, Index: -1}}
	var bestCreated int64
	consider := func(src ResumeSource, i, common int, runs []ReuseRun, created int64) {
		c := planPastChange(in, src, i, common, runs)
		worth, bestWorth := c.Tokens+c.Approximate, best.Tokens+best.Approximate
		if best.Index < 0 || worth > bestWorth || (worth == bestWorth && (c.Tokens > best.Tokens ||
			(c.Tokens == best.Tokens && src == ResumeSnapshot && best.Source == ResumeSnapshot && created > bestCreated))) {
			best, bestCreated = c, created
		}
	}
	for i, n := range in.Arena {
		// An orphan tape is adopted by its common prefix, as ever; past
		// the change it keeps its segments only then. One sharing less
		// stays an orphan and lends them as a donor (copied, read-only,
		// for other sessions too).
		if runs := runsOf(in.ArenaRuns, i); n >= in.MinTokens {
			consider(ResumeArena, i, n, runs, 0)
		}
	}
	for i, s := range in.Snapshots {
		consider(ResumeSnapshot, i, s.CommonTokens, runsOf(in.SnapshotRuns, i), s.Created)
	}
	worth := best.Tokens + best.Approximate
	if best.Index < 0 || best.Approximate == 0 || worth < in.MinTokens || worth <= base.Tokens {
		return plan
	}
	return best
}

// runsOf is runs[i], or none.
func runsOf(runs [][]ReuseRun, i int) []ReuseRun {
	if i < len(runs) {
		return runs[i]
	}
	return nil
}

// planPastChange is source i's plan: its common prefix, and the segments
// past it that PlanSegmentReuse would move.
func planPastChange(in ResumeInput, src ResumeSource, i, common int, runs []ReuseRun) ResumePlan {
	kept := min(common, in.TargetTokens)
	c := ResumePlan{ResumeChoice: ResumeChoice{Source: src, Index: i, Tokens: kept}, Upto: kept}
	if len(runs) == 0 || kept >= in.TargetTokens {
		return c
	}
	p, err := PlanSegmentReuse(SegmentReuseInput{Mode: in.Reuse.Mode, Kept: kept, PromptTokens: in.TargetTokens, Runs: runs,
		Cost: in.Reuse.Cost, LatencySeconds: in.Reuse.LatencySeconds})
	if err != nil || p.Approximate == 0 {
		return c
	}
	// Bring back every matched segment, so the sync sees the same runs
	// and makes the same plan. Sources come in any order (a segment may
	// repeat one inside the kept prefix): restore up to the furthest.
	for _, r := range runs {
		c.Upto = max(c.Upto, r.Src+r.Len)
	}
	c.Approximate, c.Recomputed, c.Choice = p.Approximate, p.Recomputed, p.Choice
	return c
}

// AdoptionExtent is how much of an orphan tape a session adopting it by
// plan (ResumeArena) keeps, and how much of that is its exact common
// prefix with the target. blocks is the tape's length in sealed blocks,
// held its length with the closed session's open tail (blocks when it
// has none), tailCommon the tokens the target shares with blocks + tail.
//   - Past a first change (plan.Upto > plan.Tokens): all it holds. The
//     ensure-prefix sync that follows moves the matched segments into
//     place and keeps what followed the last of them behind the new
//     prefix, as the closed session's own call would have had it stayed
//     open (the conversation its prefill-suffix call repeats).
//   - Else, when its common prefix reaches the end of its blocks: the
//     prefix it shares with the blocks and the tail (tailCommon), exact.
//     The tail never counts in the prefix ChooseResume weighs, so a
//     snapshot sharing as much still wins there.
//   - Else plan.Upto (= plan.Tokens).
func AdoptionExtent(plan ResumePlan, blocks, held, tailCommon int) (upto, exact int) {
	switch {
	case plan.Upto > plan.Tokens:
		return max(plan.Upto, held), plan.Tokens
	case held > blocks && plan.Tokens == blocks && tailCommon > blocks:
		n := min(tailCommon, held)
		return n, n
	}
	return plan.Upto, plan.Tokens
}
