package policy

// TurnQueryInput is what a turn offers to ask retrieval with.
type TurnQueryInput struct {
	// Turn holds the tokens the turn brings: its new, volatile segments
	// (the user message, the newest tool output), whether or not some of
	// them are already in the engine from an earlier attempt of the turn.
	Turn []int32
	// New holds the tokens about to be prefilled this turn (the part of
	// the prompt past the reused prefix).
	New []int32
	// MaxTokens caps the query; the newest tokens are kept. 0 means no cap.
	MaxTokens int
}

// TurnQuery returns the tokens parked blocks are scored against for a
// turn: what the turn brings (Turn), or, when the turn names no segment of
// its own, the new tokens; never the recent window, whose text matches
// the blocks most like what is already hot and, on natural text, drowns
// the few tokens that say what the turn needs. Only the newest MaxTokens
// are kept. The result aliases the input.
func TurnQuery(in TurnQueryInput) []int32 {
	q := in.Turn
	if len(q) == 0 {
		q = in.New
	}
	if in.MaxTokens > 0 && len(q) > in.MaxTokens {
		q = q[len(q)-in.MaxTokens:]
	}
	return q
}

// TurnRecentTokens is the part of the recent window a turn keeps from the
// stream before it: the turn's own new tokens are the newest context, so
// they count toward the window. Without this a long turn (a user message,
// a tool's output) would crowd out every retrieved block: the retrieval
// budget of a turn is what is left of the hot budget after the suffix and
// the protected blocks.
func TurnRecentTokens(recent, newTokens int) int { return max(0, recent-newTokens) }
