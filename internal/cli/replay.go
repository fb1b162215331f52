package cli

import (
	"fmt"
	"io"

	"github.com/ctxd/ctxd/internal/replay"
)

// PrintReplaySummary writes the summary of one replayed trace as text.
func PrintReplaySummary(w io.Writer, rep *replay.Report) {
	s := rep.Summary
	fmt.Fprintf(w, "\n%s: %d turns, context %d tokens\n", rep.Trace, s.Turns, rep.ContextTokens)
	if s.Overflow != nil {
		fmt.Fprintf(w, "overflow_at_turn %d: prompt needs %d tokens, context holds %d (not truncated)\n", s.OverflowAtTurn, s.Overflow.PromptTokens, s.Overflow.ContextTokens)
	}
	fmt.Fprintf(w, "reuse_ratio %.4f  prompt_reuse %.4f  (turns 2..n)\n", s.ReuseRatio, s.PromptReuse)
	if s.WarmColdRatio != nil {
		fmt.Fprintf(w, "warm_cold_ratio %.3f (bound 3×(1−prompt_reuse) = %.3f)  cold_match_all %v  max_logit_diff %.3g\n",
			*s.WarmColdRatio, *s.WarmColdBound, *s.ColdMatchAll, *s.MaxLogitDiff)
	}
	if s.Snapshot != "" {
		fmt.Fprintf(w, "snapshot %s saved; final_tokens %v\n", s.Snapshot, s.FinalTokens)
	}
}
