package client

import (
	"time"

	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// SegmentResidency is how much of one manifest segment the session holds.
type SegmentResidency struct {
	ID             string      `json:"id,omitempty"`
	Kind           SegmentKind `json:"kind,omitempty"`
	Class          CacheClass  `json:"class,omitempty"`
	Tokens         int         `json:"tokens,omitempty"`
	ResidentTokens int         `json:"resident_tokens,omitempty"` // of Tokens, held with their KV
	FirstPosition  int         `json:"first_position,omitempty"`
	Stable         bool        `json:"stable,omitempty"`
}

// RetrievedBlock is a block retrieval brought back into the hot set.
type RetrievedBlock struct {
	BlockID    uint64  `json:"block_id,omitempty"`
	FirstToken int     `json:"first_token,omitempty"` // position of its first token in the session's stream
	Tokens     int     `json:"tokens,omitempty"`
	Score      float64 `json:"score,omitempty"`
	Reason     string  `json:"reason,omitempty"`
}

// TokenRange is the token positions [Start, End).
type TokenRange struct {
	Start int `json:"start,omitempty"`
	End   int `json:"end,omitempty"`
}

// RetrievalCandidate is one block a scorer ranked.
type RetrievalCandidate struct {
	BlockID    uint64  `json:"block_id,omitempty"`
	FirstToken int     `json:"first_token,omitempty"`
	Tokens     int     `json:"tokens,omitempty"`
	Score      float64 `json:"score,omitempty"`
	Rank       int     `json:"rank,omitempty"`     // 1 is best
	Admitted   bool    `json:"admitted,omitempty"` // retrieved into the hot set by that plan
}

// ScorerReport is what one retrieval scorer did at the last plan.
type ScorerReport struct {
	Name         string               `json:"name,omitempty"` // "lexical", "attention" or "fused"
	Scoring      time.Duration        `json:"scoring_ns,omitempty"`
	Blocks       int                  `json:"blocks,omitempty"`        // blocks it scored
	SummaryBytes int64                `json:"summary_bytes,omitempty"` // memory its per-block summaries take
	Top          []RetrievalCandidate `json:"top,omitempty"`
}

// RetrievalReport is the session's last retrieval.
type RetrievalReport struct {
	Turn         int            `json:"turn,omitempty"`          // the session's turn counter at that retrieval
	Scorers      string         `json:"scorers,omitempty"`       // "none", "lexical", "attention" or "both"
	QueryTokens  int            `json:"query_tokens,omitempty"`  // tokens the query held
	BudgetTokens int            `json:"budget_tokens,omitempty"` // room for retrieved blocks
	Scorer       []ScorerReport `json:"scorer,omitempty"`
}

// Explanation is what a session holds and why: its segments' residency,
// the hot set, retrieval and the last restore.
type Explanation struct {
	SessionID       uint64             `json:"session_id,omitempty"`
	ResidentTokens  int                `json:"resident_tokens,omitempty"` // all tokens of the session (its stream)
	GeneratedTokens int                `json:"generated_tokens,omitempty"`
	Segments        []SegmentResidency `json:"segments,omitempty"`
	TokensByClass   map[string]int     `json:"tokens_by_class,omitempty"`
	Capacity        Capacity           `json:"capacity,omitempty"`
	CompatKey       string             `json:"compat_key,omitempty"`
	HotTokens       int                `json:"hot_tokens,omitempty"`       // in the engine now
	ParkedTokens    int                `json:"parked_tokens,omitempty"`    // in the host-RAM arena only
	ProtectedTokens int                `json:"protected_tokens,omitempty"` // sinks + pinned + recent at the last plan
	RetrievedTokens int                `json:"retrieved_tokens,omitempty"` // admitted by retrieval at the last plan
	HotBlocks       int                `json:"hot_blocks,omitempty"`
	ParkedBlocks    int                `json:"parked_blocks,omitempty"`
	LostBlocks      int                `json:"lost_blocks,omitempty"` // dropped from a full arena: tokens kept, KV gone
	Retrieved       []RetrievedBlock   `json:"retrieved,omitempty"`
	Diagnostics     []string           `json:"diagnostics,omitempty"`
	Evictions       int                `json:"evictions,omitempty"`
	Admissions      int                `json:"admissions,omitempty"`
	Restore         *RestoreReport     `json:"restore,omitempty"` // the last restore or resume; nil if none
	Cold            ColdStatus         `json:"cold,omitempty"`
	ColdBlocks      int                `json:"cold_blocks,omitempty"` // spilled from a full arena to the SSD tier
	ColdTokens      int                `json:"cold_tokens,omitempty"`
	HotRanges       []TokenRange       `json:"hot_ranges,omitempty"`
	LastRetrieval   *RetrievalReport   `json:"last_retrieval,omitempty"` // nil before any retrieval
	// ApproximateTokens are the stream's tokens whose KV is approximate
	// (segment reuse past an early change); LastPrefix is what the last
	// EnsurePrefix or PrefillSuffix reused, and how.
	ApproximateTokens int           `json:"approximate_tokens,omitempty"`
	LastPrefix        *PrefixResult `json:"last_prefix,omitempty"`
}

func explanation(r *pb.ExplainReply) Explanation {
	e := Explanation{
		SessionID: r.GetSessionId(), ResidentTokens: int(r.GetResidentTokens()), GeneratedTokens: int(r.GetGeneratedTokens()),
		Capacity: capacity(r.GetCapacity()), CompatKey: r.GetCompatKey(), HotTokens: int(r.GetHotTokens()),
		ParkedTokens: int(r.GetParkedTokens()), ProtectedTokens: int(r.GetProtectedTokens()), RetrievedTokens: int(r.GetRetrievedTokens()),
		HotBlocks: int(r.GetHotBlocks()), ParkedBlocks: int(r.GetParkedBlocks()), LostBlocks: int(r.GetLostBlocks()),
		Diagnostics: r.GetDiagnostics(), Evictions: int(r.GetEvictions()), Admissions: int(r.GetAdmissions()),
		Restore: restoreReport(r.GetRestore()), Cold: coldStatus(r.GetCold()), ColdBlocks: int(r.GetColdBlocks()), ColdTokens: int(r.GetColdTokens()),
		ApproximateTokens: int(r.GetApproximateTokens()),
	}
	if lp := r.GetLastPrefix(); lp != nil {
		p := prefixResult(lp)
		e.LastPrefix = &p
	}
	for _, s := range r.GetSegments() {
		e.Segments = append(e.Segments, SegmentResidency{
			ID: s.GetId(), Kind: SegmentKind(s.GetKind()), Class: CacheClass(s.GetClass()), Tokens: int(s.GetTokens()),
			ResidentTokens: int(s.GetResidentTokens()), FirstPosition: int(s.GetFirstPosition()), Stable: s.GetStable(),
		})
	}
	if len(r.GetTokensByClass()) > 0 {
		e.TokensByClass = make(map[string]int, len(r.GetTokensByClass()))
		for k, v := range r.GetTokensByClass() {
			e.TokensByClass[k] = int(v)
		}
	}
	for _, b := range r.GetRetrieved() {
		e.Retrieved = append(e.Retrieved, RetrievedBlock{BlockID: b.GetBlockId(), FirstToken: int(b.GetFirstToken()), Tokens: int(b.GetTokens()), Score: b.GetScore(), Reason: b.GetReason()})
	}
	for _, t := range r.GetHotRanges() {
		e.HotRanges = append(e.HotRanges, TokenRange{Start: int(t.GetStart()), End: int(t.GetEnd())})
	}
	if lr := r.GetLastRetrieval(); lr != nil {
		rr := &RetrievalReport{Turn: int(lr.GetTurn()), Scorers: lr.GetScorers(), QueryTokens: int(lr.GetQueryTokens()), BudgetTokens: int(lr.GetBudgetTokens())}
		for _, sc := range lr.GetScorer() {
			s := ScorerReport{Name: sc.GetName(), Scoring: time.Duration(sc.GetScoringUs()) * time.Microsecond, Blocks: int(sc.GetBlocks()), SummaryBytes: sc.GetSummaryBytes()}
			for _, c := range sc.GetTop() {
				s.Top = append(s.Top, RetrievalCandidate{BlockID: c.GetBlockId(), FirstToken: int(c.GetFirstToken()), Tokens: int(c.GetTokens()), Score: c.GetScore(), Rank: int(c.GetRank()), Admitted: c.GetAdmitted()})
			}
			rr.Scorer = append(rr.Scorer, s)
		}
		e.LastRetrieval = rr
	}
	return e
}
