package policy

import (
	"fmt"
	"math"
)

// PrefillCost models the time to prefill one suffix token that attends to a
// hot set of h tokens as BaseSeconds + PerContextSeconds × h: a fixed part
// (weights, MLP) plus attention, which grows with the context. A suffix of s
// tokens then takes s × (BaseSeconds + PerContextSeconds × h), so a turn's
// cost grows with the hot set, and quadratically with a growing context.
type PrefillCost struct {
	// BaseSeconds is the prefill time per token at an empty context.
	BaseSeconds float64
	// PerContextSeconds is the added prefill time per token for each token
	// of context attended to.
	PerContextSeconds float64
}

// TurnSeconds returns the estimated prefill time of suffixTokens tokens
// against a hot set of hotTokens tokens: suffixTokens × (BaseSeconds +
// PerContextSeconds × hotTokens).
func (c PrefillCost) TurnSeconds(suffixTokens, hotTokens int) float64 {
	return float64(suffixTokens) * (c.BaseSeconds + c.PerContextSeconds*float64(hotTokens))
}

// FitPrefillCost fits a PrefillCost through two measurements of prefill
// throughput, tokensPerSecondA at a context of ctxA tokens and
// tokensPerSecondB at ctxB (e.g. from a prefillTokensPerSecondAt(ctx)
// benchmark). Measurement noise that makes the slope negative gives
// PerContextSeconds 0 and BaseSeconds the slower of the two; a negative
// intercept gives BaseSeconds 0. Contexts must be distinct and non-negative,
// throughputs positive and finite; otherwise the error wraps
// ErrInvalidHotSet.
func FitPrefillCost(ctxA int, tokensPerSecondA float64, ctxB int, tokensPerSecondB float64) (PrefillCost, error) {
	switch {
	case ctxA < 0 || ctxB < 0 || ctxA == ctxB:
		return PrefillCost{}, fmt.Errorf("%w: contexts must be distinct and non-negative, got %d and %d", ErrInvalidHotSet, ctxA, ctxB)
	case !positiveFinite(tokensPerSecondA) || !positiveFinite(tokensPerSecondB):
		return PrefillCost{}, fmt.Errorf("%w: throughputs must be positive and finite, got %g and %g tokens/s", ErrInvalidHotSet, tokensPerSecondA, tokensPerSecondB)
	}
	ta, tb := 1/tokensPerSecondA, 1/tokensPerSecondB
	slope := (tb - ta) / float64(ctxB-ctxA)
	if slope <= 0 {
		return PrefillCost{BaseSeconds: max(ta, tb)}, nil
	}
	return PrefillCost{BaseSeconds: max(0, ta-slope*float64(ctxA)), PerContextSeconds: slope}, nil
}

// LatencyHotBudget returns the largest hot budget h, at most maxTokens and
// at least suffixTokens (the budget holds the suffix too), whose estimated
// turn time c.TurnSeconds(suffixTokens, h) stays within latencySeconds.
// Counting the whole budget as context for every suffix token overestimates
// slightly, which errs on the safe side. Pass the memory-bound budget as
// maxTokens; with no attention cost or no suffix the result is maxTokens.
//
// When even h = suffixTokens is too slow, or maxTokens < suffixTokens, the
// error wraps ErrHotBudget. Negative or non-finite costs, a latency that is
// not positive, or negative token counts give an error wrapping
// ErrInvalidHotSet.
func LatencyHotBudget(c PrefillCost, latencySeconds float64, suffixTokens, maxTokens int) (int, error) {
	switch {
	case !nonNegativeFinite(c.BaseSeconds) || !nonNegativeFinite(c.PerContextSeconds):
		return 0, fmt.Errorf("%w: prefill cost must be non-negative and finite, got %g s + %g s per context token",
			ErrInvalidHotSet, c.BaseSeconds, c.PerContextSeconds)
	case math.IsNaN(latencySeconds) || latencySeconds <= 0:
		return 0, fmt.Errorf("%w: latency budget must be positive, got %g s", ErrInvalidHotSet, latencySeconds)
	case suffixTokens < 0 || maxTokens < 0:
		return 0, fmt.Errorf("%w: token counts must not be negative, got suffix %d and max %d", ErrInvalidHotSet, suffixTokens, maxTokens)
	case maxTokens < suffixTokens:
		return 0, fmt.Errorf("%w: a suffix of %d tokens exceeds the most the engine may hold, %d tokens", ErrHotBudget, suffixTokens, maxTokens)
	}
	if t := c.TurnSeconds(suffixTokens, suffixTokens); t > latencySeconds {
		return 0, fmt.Errorf("%w: a suffix of %d tokens alone takes an estimated %.3g s to prefill, over the latency budget of %.3g s",
			ErrHotBudget, suffixTokens, t, latencySeconds)
	}
	// TurnSeconds is non-decreasing in h: find the last h that fits.
	lo, hi := suffixTokens, maxTokens // lo fits; answer in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if c.TurnSeconds(suffixTokens, mid) <= latencySeconds {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo, nil
}

func positiveFinite(x float64) bool    { return x > 0 && !math.IsInf(x, 1) }
func nonNegativeFinite(x float64) bool { return x >= 0 && !math.IsInf(x, 1) }
