package layout

import (
	"time"

	"github.com/ctxd/ctxd/policy"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// explainCandidates is how many of each scorer's best blocks explain
// lists.
const explainCandidates = 8

// retrievalReport is what a session's last retrieval asked, found and
// admitted; explain reports it.
type retrievalReport struct {
	turn         int64
	scorers      policy.ScorerSet
	queryTokens  int
	budgetTokens int
	ranked       []scorerRun
	admitted     map[uint64]bool // retrieved by the plan
}

// scorerRun is one scorer's ranking of the parked blocks for a turn.
type scorerRun struct {
	name         string
	took         time.Duration
	top          []policy.BlockScore // best first, at most explainCandidates
	blocks       int
	summaryBytes int64
}

func (r *retrievalReport) add(name string, took time.Duration, scores []policy.BlockScore, blocks int, summaryBytes int64) {
	r.ranked = append(r.ranked, scorerRun{name: name, took: took, top: append([]policy.BlockScore(nil), scores[:min(len(scores), explainCandidates)]...),
		blocks: blocks, summaryBytes: summaryBytes})
}

// wire renders the report for ExplainReply.
func (r *retrievalReport) wire(h *hotSet) *pb.RetrievalReport {
	out := &pb.RetrievalReport{Turn: r.turn, Scorers: r.scorers.String(), QueryTokens: int64(r.queryTokens), BudgetTokens: int64(r.budgetTokens)}
	for _, run := range r.ranked {
		sr := &pb.ScorerReport{Name: run.name, ScoringUs: run.took.Microseconds(), Blocks: int64(run.blocks), SummaryBytes: run.summaryBytes}
		for i, s := range run.top {
			c := &pb.RetrievalCandidate{BlockId: s.ID, Score: s.Score, Rank: int64(i + 1), Admitted: r.admitted[s.ID]}
			if b := h.find(s.ID); b != nil {
				c.FirstToken, c.Tokens = int64(b.vstart), int64(b.n)
			}
			sr.Top = append(sr.Top, c)
		}
		out.Scorer = append(out.Scorer, sr)
	}
	return out
}
