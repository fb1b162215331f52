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
