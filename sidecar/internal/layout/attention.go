package layout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// The attention scorer (policy.AttentionIndex) in a hot set:
//
//   - A sealed block's keys are read out of the range blob it was parked
//     with (engine.KeyReader) and summarised at once when the hot set ranks
//     with attention (or already keeps summaries). Blocks without a
//     summary — sealed while attention was off, adopted from an orphan
//     tape, restored from a snapshot — get one lazily, at the next turn
//     that ranks with attention, from their arena copy; blocks whose KV is
//     only on the SSD tier are not read back for it and keep only their
//     lexical score (0 under attention alone). The sinks' block is never
//     summarised: its first token draws every query's attention whatever
//     the query asks, and it is always hot.
//   - Retrieval runs before a turn's tokens are prefilled, so the turn's
//     queries are captured by a probe: its newest
//     policy.AttentionProbeTokens query tokens are decoded
//     (engine.QueryCapturer) at the positions right after the hot set,
//     the queries of their last policy.AttentionQueryRows kept, and the
//     probe removed again before planning. The engine holds two blocks of
//     cells beyond the hot limit (for admissions' scratch), so the probe
//     always has room.
//   - With both scorers the two rankings are fused (policy.FuseScores,
//     policy.DefaultFusion) into the scores the plan admits from, within
//     the same retrieval budget.
//
// The lazy summaries', the probe's and the scoring's time are reported as
// the attention scorer's, the summaries' memory as its summary bytes.

// attentionEngine returns the engine's attention capabilities, or ok false
// when it lacks either.
func attentionEngine(ectx engine.Context) (engine.QueryCapturer, engine.KeyReader, bool) {
	qc, ok1 := ectx.(engine.QueryCapturer)
	kr, ok2 := ectx.(engine.KeyReader)
	return qc, kr, ok1 && ok2
}

// errNoAttention reports an engine without the attention contracts.
var errNoAttention = errors.New("the engine cannot capture attention queries or read keys")

// attentionIndex returns the hot set's attention index, creating it.
func (h *hotSet) attentionIndex() (*policy.AttentionIndex, error) {
	if h.attn != nil {
		return h.attn, nil
	}
	if _, _, ok := attentionEngine(h.env.Engine); !ok {
		return nil, errNoAttention
	}
	shape := h.env.Attention
	plan, err := policy.PlanKeySummary(shape, h.env.Hot.Block, h.env.KVType, policy.DefaultKeySummaryFraction)
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

// isSink says whether b is the sinks' block.
func (h *hotSet) isSink(b *hotBlock) bool { return b.vstart == 0 && h.env.Hot.Sinks > 0 }

// summarizeSealed keeps a key summary of a block just sealed, when the
// hot set ranks with attention or already keeps summaries. A failure is
// noted: the block keeps its lexical score only.
func (h *hotSet) summarizeSealed(b *hotBlock, r engine.Range) {
	if !h.env.Hot.Scorers.Has(policy.ScorerAttention) && h.attn == nil || h.isSink(b) {
		return
	}
	if err := h.summarize(b.id, r); err != nil {
		h.note(fmt.Sprintf("block %d has no key summary: %v", b.id, err))
	}
}

// summarize reads r's keys and keeps block id's summary.
func (h *hotSet) summarize(id uint64, r engine.Range) error {
	x, err := h.attentionIndex()
	if err != nil {
		return err
	}
	_, kr, _ := attentionEngine(h.env.Engine)
	keys, err := kr.RangeKeys(r, x.Plan().Layers)
	if err != nil {
		return err
	}
	return x.Put(id, keys)
}

// summarizeMissing gives every block with an arena copy and no summary
// one (the lazy path); blocks on the SSD tier only are left out.
func (h *hotSet) summarizeMissing() {
	var kv []byte
	for _, b := range h.blocks {
		if b.res.copyTier() != tiers.Arena || h.attn.Has(b.id) || h.isSink(b) {
			continue
		}
		got, err := h.env.Tiers.ReadParked(b.id, kv[:0])
		if err == nil {
			kv = got
			err = h.summarize(b.id, engine.Range{Pos0: b.pos0, Count: b.n, Blob: got})
		}
		if err != nil {
			h.note(fmt.Sprintf("block %d has no key summary: %v", b.id, err))
		}
	}
}

// forgetSummary drops a block's summary.
func (h *hotSet) forgetSummary(id uint64) {
	if h.attn != nil {
		h.attn.Remove(id)
	}
}

// probeQueries captures the attention queries of the query's newest
// tokens, decoded right after the hot set and removed again.
func (h *hotSet) probeQueries(ctx context.Context, query []engine.Token, layers []int) (policy.HeadVectors, error) {
	qc, _, ok := attentionEngine(h.env.Engine)
	if !ok {
		return policy.HeadVectors{}, errNoAttention
	}
	toks := query[max(0, len(query)-policy.AttentionProbeTokens):]
	pos0 := h.physEnd()
	h.tape.logitsAt = -1
	q, err := qc.DecodeCapture(ctx, toks, pos0, min(len(toks), policy.AttentionQueryRows), layers)
	if err != nil {
		return q, EngineErr(err)
	}
	if _, err := h.env.Engine.Remove(pos0, pos0+len(toks)); err != nil {
		return q, EngineErr(err)
	}
	return q, nil
}

// attentionRank ranks the hot set's blocks by attention for the turn's
// query and, when lex is not nil (both scorers), fuses the two rankings;
// it returns the scores the plan admits from and reports each ranking.
// Only cancellation fails the turn: any other failure is noted and the
// lexical ranking (possibly none) stands.
func (h *hotSet) attentionRank(ctx context.Context, query []engine.Token, lex []policy.BlockScore, rep *retrievalReport) ([]policy.BlockScore, error) {
	if len(query) == 0 {
		return lex, nil
	}
	start := time.Now()
	x, err := h.attentionIndex()
	if err != nil {
		h.note(fmt.Sprintf("attention scorer off: %v", err))
		return lex, nil
	}
	h.summarizeMissing()
	q, err := h.probeQueries(ctx, query, x.Plan().Layers)
	if err == nil {
		var scores []policy.BlockScore
		if scores, err = x.Score(q); err == nil {
			rep.add("attention", time.Since(start), scores, x.Len(), x.Bytes())
			if lex == nil {
				return scores, nil
			}
			start = time.Now()
			fused := policy.FuseScores(policy.DefaultFusion, lex, scores)
			rep.add("fused", time.Since(start), fused, len(fused), 0)
			return fused, nil
		}
	}
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return nil, err
	}
	h.note(fmt.Sprintf("attention scorer skipped this turn: %v", err))
	return lex, nil
}
