package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
)

// The attention scorer (policy.AttentionIndex) in the daemon:
//
//   - A sealed block's keys are read out of the range blob it was parked
//     with (engine.KeyReader) and summarised at once when the server ranks
//     with attention (or the session already keeps summaries). Blocks
//     without a summary — sealed while attention was off, adopted from a
//     re-attached arena, restored from a snapshot — get one lazily, at the
//     next turn that ranks with attention, from their arena copy; blocks
//     whose KV is only on the SSD tier are not read back for it and keep
//     only their lexical score (0 under attention alone).
//   - Retrieval runs before a turn's tokens are prefilled, so the turn's
//     queries are captured by a probe: its newest
//     policy.AttentionProbeTokens query tokens are decoded
//     (engine.QueryCapturer) at the positions right after the hot set,
//     their last policy.AttentionQueryRows rows' queries kept, and the
//     probe removed again before planning. The engine holds two blocks of
//     cells beyond the hot budget (for admissions' scratch), so the probe
//     always has room; its tokens sit at most AttentionProbeTokens
//     positions past the hot set, never past the cells.
//   - With both scorers, the two rankings are fused (policy.FuseScores,
//     policy.DefaultFusion) into the scores the plan admits from, within
//     the same retrieval budget.
//
// The probe's and the scoring's time are reported as the attention
// scorer's, the summaries' memory as its summary bytes (ctxctl explain).

// attentionEngine returns the engine's attention capabilities, or ok false
// when it lacks either.
func attentionEngine(ectx engine.Context) (engine.QueryCapturer, engine.KeyReader, bool) {
	qc, ok1 := ectx.(engine.QueryCapturer)
	kr, ok2 := ectx.(engine.KeyReader)
	return qc, kr, ok1 && ok2
}

// checkScorers refuses scorers the engine cannot run.
func checkScorers(s policy.ScorerSet, ectx engine.Context) error {
	if !s.Has(policy.ScorerAttention) {
		return nil
	}
	if ectx == nil {
		return fmt.Errorf("%w: the attention scorer needs a loaded model", ErrScorerUnavailable)
	}
	if _, _, ok := attentionEngine(ectx); !ok {
		return fmt.Errorf("%w: the engine cannot capture attention queries or read keys (engine.QueryCapturer, engine.KeyReader)", ErrScorerUnavailable)
	}
	return nil
}

// attentionShape is the loaded model's attention geometry.
func (srv *Server) attentionShape() policy.AttentionShape {
	f := srv.slot.facts
	return policy.AttentionShape{Layers: f.Layers, Heads: f.Heads, KVHeads: f.KVHeads, HeadDim: f.HeadDim}
}

// attentionIndex returns the session's attention index, creating it.
func (srv *Server) attentionIndex(h *hotState) (*policy.AttentionIndex, error) {
	if h.attn != nil {
		return h.attn, nil
	}
	shape := srv.attentionShape()
	plan, err := policy.PlanKeySummary(shape, srv.slot.hot.block, srv.slot.kvType(), policy.DefaultKeySummaryFraction)
	if err != nil {
		return nil, err
	}
	x, err := policy.NewAttentionIndex(shape, plan)
	if err != nil {
		return nil, err
	}
	h.attn = x
	return x, nil
}

// summarizeSealed keeps a key summary of a block just sealed, when the
// server ranks with attention or the session already keeps summaries.
// A failure is noted: the block keeps its lexical score only.
func (srv *Server) summarizeSealed(h *hotState, b *hotBlock, r engine.Range) {
	if !srv.slot.hot.scorers.Has(policy.ScorerAttention) && h.attn == nil || srv.isSink(b) {
		return
	}
	if err := srv.summarize(h, b.id, r); err != nil {
		h.note(fmt.Sprintf("block %d has no key summary: %v", b.id, err))
	}
}

// isSink says whether b is the sinks' block. It is always hot, and its
// first token draws attention from every query whatever the query asks
// (an attention sink): the attention scorer leaves it out.
func (srv *Server) isSink(b *hotBlock) bool { return b.vstart == 0 && srv.slot.hot.sinks > 0 }

// summarize reads r's keys and keeps block id's summary.
func (srv *Server) summarize(h *hotState, id uint64, r engine.Range) error {
	_, kr, ok := attentionEngine(srv.slot.ectx)
	if !ok {
		return fmt.Errorf("%w: the engine cannot read keys", ErrScorerUnavailable)
	}
	x, err := srv.attentionIndex(h)
	if err != nil {
		return err
	}
	keys, err := kr.RangeKeys(r, x.Plan().Layers)
	if err != nil {
		return err
	}
	return x.Put(id, keys)
}

// summarizeMissing gives every block with an arena copy and no summary
// one (the lazy path); blocks on the SSD tier only are left out.
func (srv *Server) summarizeMissing(h *hotState) {
	var kv []byte
	for _, b := range h.blocks {
		if !b.stored || h.attn.Has(b.id) || srv.isSink(b) {
			continue
		}
		var err error
		if kv, err = srv.readParkedKV(b.id, kv[:0]); err == nil {
			err = srv.summarize(h, b.id, engine.Range{Pos0: b.pos0, Count: b.n, Blob: kv})
		}
		if err != nil {
			h.note(fmt.Sprintf("block %d has no key summary: %v", b.id, err))
		}
	}
}

// forgetSummary drops a block's summary.
func (h *hotState) forgetSummary(id uint64) {
	if h.attn != nil {
		h.attn.Remove(id)
	}
}

// probeQueries captures the attention queries of the query's newest
// tokens, decoded right after the hot set and removed again.
func (srv *Server) probeQueries(ctx context.Context, sess *session, query []engine.Token, layers []int) (policy.HeadVectors, error) {
	qc, _, ok := attentionEngine(srv.slot.ectx)
	if !ok {
		return policy.HeadVectors{}, fmt.Errorf("%w: the engine cannot capture queries", ErrScorerUnavailable)
	}
	toks := query[max(0, len(query)-policy.AttentionProbeTokens):]
	pos0 := sess.hot.physEnd(sess)
	sess.logitsAt = -1
	q, err := qc.DecodeCapture(ctx, toks, pos0, min(len(toks), policy.AttentionQueryRows), layers)
	if err != nil {
		return q, engineErr(err)
	}
	if _, err := srv.slot.ectx.Remove(pos0, pos0+len(toks)); err != nil {
		return q, engineErr(err)
	}
	return q, nil
}

// attentionRank ranks the session's blocks by attention for the turn's
// query and, when lex is not nil (both scorers), fuses the two rankings;
// it returns the scores the plan admits from and reports each ranking.
// Only cancellation fails the turn: any other failure is noted and the
// lexical ranking (possibly none) stands.
func (srv *Server) attentionRank(ctx context.Context, sess *session, query []engine.Token, lex []policy.BlockScore, rep *retrievalReport) ([]policy.BlockScore, error) {
	h := sess.hot
	if len(query) == 0 {
		return lex, nil
	}
	start := time.Now()
	x, err := srv.attentionIndex(h)
	if err != nil {
		h.note(fmt.Sprintf("attention scorer off: %v", err))
		return lex, nil
	}
	srv.summarizeMissing(h)
	t1 := time.Now()
	q, err := srv.probeQueries(ctx, sess, query, x.Plan().Layers)
	if err == nil {
		t2 := time.Now()
		var scores []policy.BlockScore
		if scores, err = x.Score(q); err == nil {
			took := time.Since(start)
			srv.log.Debug("attention scorer", "session", sess.id, "blocks", x.Len(), "summary_bytes", x.Bytes(),
				"lazy_summaries", t1.Sub(start), "probe", t2.Sub(t1), "scoring", took-t2.Sub(start))
			rep.add("attention", took, scores, x.Len(), x.Bytes())
			if lex == nil {
				return scores, nil
			}
			start = time.Now()
			fused := policy.FuseScores(policy.DefaultFusion, lex, scores)
			rep.add("fused", time.Since(start), fused, len(fused), 0)
			return fused, nil
		}
	}
	if cerr := ctx.Err(); cerr != nil || errors.Is(err, context.Canceled) {
		return nil, err
	}
	h.note(fmt.Sprintf("attention scorer skipped this turn: %v", err))
	return lex, nil
}
