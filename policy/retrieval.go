package policy

// BlockScore is one block's relevance to a query.
type BlockScore struct {
	ID    uint64
	Score float64
}

// Scorer scores a session's blocks against a query. It is an incremental
// index: blocks are added as the context streams in and removed when
// dropped, and Score runs once per turn with the query, what the turn
// brings (TurnQuery), as token ids. BM25Index implements it over token
// n-grams; an attention-based scorer can implement it too, keeping per-block
// key summaries in Add.
//
// Implementations are deterministic: the same blocks and query give the same
// scores whatever the order blocks were added in.
type Scorer interface {
	// Add indexes block id with its tokens, replacing any block with the
	// same id.
	Add(id uint64, tokens []int32)
	// Remove drops block id and reports whether it was indexed.
	Remove(id uint64) bool
	// Len returns the number of blocks indexed.
	Len() int
	// Score returns a score for every indexed block, higher is more
	// relevant, sorted by descending score then ascending ID. An empty query
	// scores every block 0.
	Score(query []int32) []BlockScore
}

// Scores returns the scores as a map by block ID, e.g. to fill
// HotBlock.Score.
func Scores(scores []BlockScore) map[uint64]float64 {
	m := make(map[uint64]float64, len(scores))
	for _, s := range scores {
		m[s.ID] = s.Score
	}
	return m
}
