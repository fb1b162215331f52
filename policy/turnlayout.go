package policy

// A hot set is path-dependent: the blocks evicted while a reply was
// generated stay evicted when the reply is cut away again. A cut back to
// the point a turn started (the end of its prompt) may instead bring back
// the layout the session had there, so a repeated request, or a session
// resumed from a snapshot that holds the reply, answers as the first time.

// TurnLayoutInput describes a cut of a hot-set session and the layout it
// remembered at the start of its last turn.
type TurnLayoutInput struct {
	// CutAt is the tape length the cut keeps; TapeTokens the tape's
	// length before it.
	CutAt, TapeTokens int
	// MarkAt is the tape length where the remembered turn started; -1
	// when none is remembered.
	MarkAt int
	// MarkTailTokens are the turn's open tail then (its prompt's tokens
	// past the last sealed block); MarkTailInEngine whether their KV is
	// still in the engine (sealed into a block since, that block must be
	// hot).
	MarkTailTokens   int
	MarkTailInEngine bool
	// LostBlocks are the blocks hot at the mark that are not now and
	// whose KV has no copy to bring back.
	LostBlocks int
	// MarkShortfall: the turn's own layout lacked blocks its plan named
	// (a tier could not read them back then).
	MarkShortfall bool
}

// TurnLayoutChoice is what to do at such a cut.
type TurnLayoutChoice struct {
	// Restore: cut to MarkAt exactly and lay the hot set out as it was
	// there (evicting what came in since, admitting what left, every
	// block at its remembered position); otherwise cut as usual.
	Restore bool
	// Reason says why, for the session's notes.
	Reason string
}

// ChooseTurnLayout decides whether a cut restores the layout remembered
// at the start of the last turn: only a cut to exactly that point, past
// which the tape has grown (the reply), and only when the layout can be
// rebuilt exactly: the turn's open tail still in the engine and every
// block to bring back with a copy. A partial restore would be a third
// layout, neither the turn's nor the current one, so it is not tried. A
// turn whose own layout fell short of its plan (blocks a tier could not
// read back) is not restored either: asked again, the request plans
// afresh, and may get what it missed.
func ChooseTurnLayout(in TurnLayoutInput) TurnLayoutChoice {
	switch {
	case in.MarkAt < 0:
		return TurnLayoutChoice{Reason: "no turn start remembered"}
	case in.CutAt != in.MarkAt:
		return TurnLayoutChoice{Reason: "the cut is not at the turn's start"}
	case in.TapeTokens <= in.MarkAt:
		return TurnLayoutChoice{Reason: "nothing was added since the turn started"}
	case in.MarkTailTokens > 0 && !in.MarkTailInEngine:
		return TurnLayoutChoice{Reason: "the turn's open tail left the engine"}
	case in.LostBlocks > 0:
		return TurnLayoutChoice{Reason: "a block hot at the turn's start was lost"}
	case in.MarkShortfall:
		return TurnLayoutChoice{Reason: "the turn's layout lacked blocks its plan named: planning afresh"}
	}
	return TurnLayoutChoice{Restore: true, Reason: "cut back to the turn's start: its layout restored"}
}
