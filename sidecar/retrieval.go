package sidecar

import (
	"context"
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

// SetScorers changes which scorers rank parked blocks from the next turn
// on, for every session (an evaluation knob: ctxbench eval recall asks the
// same haystack with each scorer). It waits for the engine.
func (srv *Server) SetScorers(ctx context.Context, s policy.ScorerSet) error {
	if s.Has(policy.ScorerAttention) {
		cfg := Config{Scorers: s.String()}
		if _, err := cfg.ScorerSet(); err != nil {
			return err
		}
	}
	if err := srv.slot.acquire(ctx); err != nil {
		return err
	}
	defer srv.slot.release()
	srv.cfg.Scorers = s.String()
	srv.slot.hot.scorers = s // sessions' layouts read the slot's settings
	return nil
}
