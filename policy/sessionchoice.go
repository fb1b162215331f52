package policy

// Session choice for adapters that see one-shot requests (the HTTP door):
// which of the live sessions a request runs on, or none (open a new one).
// It is a cache decision: the chosen session's KV is what the request
// reuses, and what it no longer shares is overwritten.

// SessionRequest is what a request brings to the choice.
type SessionRequest struct {
	// Key is the request's affinity key (a session header, a cache key);
	// "" when it has none.
	Key string
	// Family is the agent's own text that identifies its conversation:
	// the content of the request's first message (the system prompt
	// when there is one), never text the chat template added.
	Family string
	// Segments are the rendered texts of the request's segments, in order.
	Segments []string
}

// SessionCandidate is a live session as its last request left it.
type SessionCandidate struct {
	Key      string
	Family   string
	Segments []string
	// Busy: a request runs on it or waits for it.
	Busy bool
	// LastUsed orders sessions by recency (larger is more recent).
	LastUsed int64
}

// Ways a session is chosen (SessionChoice.How).
const (
	ChosenByKey    = "key"    // the request's affinity key matched
	ChosenByPrefix = "prefix" // keyless: the longest shared prefix
	ChosenNew      = "new"    // no candidate: open a session
)

// SessionChoice is the decision: Index into the candidates, or -1 for a
// new session.
type SessionChoice struct {
	Index int
	How   string
}

// ChooseSession picks the session a request runs on:
//
//  1. Only sessions with the request's key (or, without one, sessions
//     without a key) are candidates.
//  2. The family: the request's Family and the candidate's share a prefix
//     of at least half of the shorter one (SameFamily). A side request
//     (title generator, memory extractor) has a first message of its own
//     and so a session of its own; a system prompt rebuilt with today's
//     date stays in its family.
//  3. A busy candidate is taken only when the request continues all that
//     it holds (a retry, the next turn of the conversation it runs):
//     otherwise the request would wait behind another conversation when
//     it can open its own.
//  4. Among the candidates, the longest common prefix of segment text
//     wins; ties go to the most recently used.
//
// With no candidate the choice is a new session.
func ChooseSession(req SessionRequest, cands []SessionCandidate) SessionChoice {
	best, bestN := -1, -1
	for i, c := range cands {
		if c.Key != req.Key || !SameFamily(c.Family, req.Family) {
			continue
		}
		n := CommonSegmentText(c.Segments, req.Segments)
		if c.Busy && n < totalLen(c.Segments) {
			continue
		}
		if n > bestN || (n == bestN && c.LastUsed > cands[best].LastUsed) {
			best, bestN = i, n
		}
	}
	switch {
	case best < 0:
		return SessionChoice{Index: -1, How: ChosenNew}
	case req.Key != "":
		return SessionChoice{Index: best, How: ChosenByKey}
	}
	return SessionChoice{Index: best, How: ChosenByPrefix}
}

// SameFamily reports whether two requests' family texts share a prefix of
// at least half of the shorter one. Two empty texts are one family; an
// empty and a non-empty one are not.
func SameFamily(a, b string) bool {
	n := min(len(a), len(b))
	if n == 0 {
		return len(a) == len(b)
	}
	return 2*commonBytes(a, b) >= n
}

// CommonSegmentText is the length of the common prefix of two segment
// lists' concatenated text, counted segment by segment.
func CommonSegmentText(a, b []string) int {
	total := 0
	for i := 0; i < min(len(a), len(b)); i++ {
		c := commonBytes(a[i], b[i])
		total += c
		if c < len(a[i]) || c < len(b[i]) {
			break
		}
	}
	return total
}

func commonBytes(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

func totalLen(segs []string) int {
	n := 0
	for _, s := range segs {
		n += len(s)
	}
	return n
}

// EvictSession picks the idle session to close when a table of sessions is
// full, or -1 when every one is busy. The main session of a key (the one
// holding the most text) goes last: side requests (titles, summaries,
// compaction) open sessions of their own and must not push the
// conversation they serve out. Among sessions of equal rank the least
// recently used goes first.
func EvictSession(cands []SessionCandidate) int {
	main := map[string]int{} // key -> index of its largest session
	for i, c := range cands {
		if j, ok := main[c.Key]; !ok || totalLen(c.Segments) > totalLen(cands[j].Segments) {
			main[c.Key] = i
		}
	}
	best := -1
	rank := func(i int) int {
		if main[cands[i].Key] == i {
			return 1
		}
		return 0
	}
	for i, c := range cands {
		if c.Busy {
			continue
		}
		if best < 0 || rank(i) < rank(best) || (rank(i) == rank(best) && c.LastUsed < cands[best].LastUsed) {
			best = i
		}
	}
	return best
}
