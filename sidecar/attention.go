package sidecar

import (
	"fmt"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
)

// The attention scorer itself lives with the hot set
// (sidecar/internal/layout, attention.go); the daemon only checks that the
// loaded engine can run it.

// attentionEngine reports whether the engine can capture attention
// queries and read keys (engine.QueryCapturer, engine.KeyReader).
func attentionEngine(ectx engine.Context) bool {
	_, ok1 := ectx.(engine.QueryCapturer)
	_, ok2 := ectx.(engine.KeyReader)
	return ok1 && ok2
}

// checkScorers refuses scorers the engine cannot run.
func checkScorers(s policy.ScorerSet, ectx engine.Context) error {
	if !s.Has(policy.ScorerAttention) {
		return nil
	}
	if ectx == nil {
		return fmt.Errorf("%w: the attention scorer needs a loaded model", ErrScorerUnavailable)
	}
	if !attentionEngine(ectx) {
		return fmt.Errorf("%w: the engine cannot capture attention queries or read keys (engine.QueryCapturer, engine.KeyReader)", ErrScorerUnavailable)
	}
	return nil
}
