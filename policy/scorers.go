package policy

import (
	"errors"
	"fmt"
	"strings"
)

// ScorerSet names the scorers that rank parked blocks for retrieval.
type ScorerSet uint8

// Scorers. ScorerNone retrieves nothing (the hot set keeps only sinks,
// pinned blocks and the recent window).
const (
	ScorerNone      ScorerSet = 0
	ScorerLexical   ScorerSet = 1 << 0 // BM25 over token n-grams (BM25Index)
	ScorerAttention ScorerSet = 1 << 1 // the model's own attention over key summaries
	ScorerBoth                = ScorerLexical | ScorerAttention
)

// ErrUnknownScorer reports a scorer name ParseScorerSet does not know.
var ErrUnknownScorer = errors.New("policy: unknown retrieval scorer")

// ParseScorerSet reads "none", "lexical", "attention" or "both".
func ParseScorerSet(s string) (ScorerSet, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "none":
		return ScorerNone, nil
	case "lexical":
		return ScorerLexical, nil
	case "attention":
		return ScorerAttention, nil
	case "both":
		return ScorerBoth, nil
	}
	return 0, fmt.Errorf("%w %q (none, lexical, attention, both)", ErrUnknownScorer, s)
}

// Has reports whether s includes every scorer of t.
func (s ScorerSet) Has(t ScorerSet) bool { return s&t == t && t != 0 }

// String returns the name ParseScorerSet reads.
func (s ScorerSet) String() string {
	switch s {
	case ScorerNone:
		return "none"
	case ScorerLexical:
		return "lexical"
	case ScorerAttention:
		return "attention"
	case ScorerBoth:
		return "both"
	}
	return fmt.Sprintf("ScorerSet(%d)", uint8(s))
}
