package httpapi

import "time"

// Usage, every API's, from one turnResult. A new count of the turn (say,
// tokens reused approximately or recomputed) is added to turnResult and
// mapped here for each API, and nowhere else.
//
// What each API calls what:
//   - OpenAI Chat/Completions: prompt_tokens = the whole prompt,
//     prompt_tokens_details.cached_tokens = tokens whose KV was reused;
//     llama-server's timings (cache_n, prompt_n = tokens evaluated).
//   - Ollama: prompt_eval_count = tokens evaluated, prompt_cache_count
//     (ctxd's) = reused, prompt_tokens (ctxd's) = the whole prompt.
//   - Anthropic: input_tokens = tokens prefilled by this request,
//     cache_read_input_tokens = reused, cache_creation_input_tokens = 0
//     (ctxd keeps every prompt's KV without a separate write), so
//     input + cache_read is the whole prompt as clients add it up.
//   - OpenAI Responses: input_tokens = the whole prompt,
//     input_tokens_details.cached_tokens = reused.
//
// "Reused" is always exact reuse: KV equal to what a cold prefill would
// compute. KV kept approximately (unchanged segments moved past an early
// change, docs/HTTP.md) is counted apart in each API's own extension
// field (approximate_…), and so are the tokens of such segments prefilled
// again (recomputed_…, part of the tokens prefilled): no client is told a
// prompt was cached exactly when it was not.

// oaiUsage is usage with llama-server-style timings.
type oaiUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"` // exact reuse only
		// ctxd's: reused KV that is approximate (moved past an early
		// change), and tokens of unchanged segments prefilled again.
		ApproximateCachedTokens int `json:"approximate_cached_tokens,omitempty"`
		RecomputedTokens        int `json:"recomputed_tokens,omitempty"`
	} `json:"prompt_tokens_details"`
}

type oaiTimings struct {
	CacheN              int     `json:"cache_n"`                  // exact reuse only
	CacheApproxN        int     `json:"cache_approx_n,omitempty"` // approximate reuse (ctxd)
	PromptN             int     `json:"prompt_n"`
	PromptMS            float64 `json:"prompt_ms"`
	PromptPerTokenMS    float64 `json:"prompt_per_token_ms"`
	PromptPerSecond     float64 `json:"prompt_per_second"`
	PredictedN          int     `json:"predicted_n"`
	PredictedMS         float64 `json:"predicted_ms"`
	PredictedPerTokenMS float64 `json:"predicted_per_token_ms"`
	PredictedPerSecond  float64 `json:"predicted_per_second"`
}

func usageOf(r turnResult) (*oaiUsage, *oaiTimings) {
	u := &oaiUsage{PromptTokens: r.promptTokens, CompletionTokens: r.decodedTokens, TotalTokens: r.promptTokens + r.decodedTokens}
	u.PromptTokensDetails.CachedTokens = r.cachedTokens
	u.PromptTokensDetails.ApproximateCachedTokens, u.PromptTokensDetails.RecomputedTokens = r.approxTokens, r.recomputed
	t := &oaiTimings{CacheN: r.cachedTokens, CacheApproxN: r.approxTokens, PromptN: r.prefilledTokens, PromptMS: ms(r.promptDur), PredictedN: r.decodedTokens, PredictedMS: ms(r.decodeDur)}
	if r.prefilledTokens > 0 {
		t.PromptPerTokenMS = t.PromptMS / float64(r.prefilledTokens)
		t.PromptPerSecond = float64(r.prefilledTokens) / r.promptDur.Seconds()
	}
	if r.decodedTokens > 0 {
		t.PredictedPerTokenMS = t.PredictedMS / float64(r.decodedTokens)
		t.PredictedPerSecond = float64(r.decodedTokens) / r.decodeDur.Seconds()
	}
	return u, t
}

// ollamaCounts are the counts of Ollama's final event.
func ollamaCounts(r turnResult) map[string]any {
	return map[string]any{
		"load_duration":                  0,
		"prompt_eval_count":              r.prefilledTokens,
		"prompt_eval_duration":           r.promptDur.Nanoseconds(),
		"prompt_cache_count":             r.cachedTokens,
		"prompt_cache_approximate_count": r.approxTokens,
		"prompt_recomputed_count":        r.recomputed,
		"prompt_tokens":                  r.promptTokens,
		"eval_count":                     r.decodedTokens,
		"eval_duration":                  r.decodeDur.Nanoseconds(),
	}
}

// anthropicUsage is Anthropic's usage object.
type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	// ctxd's: approximate reuse and recomputed tokens (of input_tokens),
	// so input + cache_read + approximate_cache_read is the whole prompt.
	ApproximateCacheReadInputTokens int `json:"approximate_cache_read_input_tokens,omitempty"`
	RecomputedInputTokens           int `json:"recomputed_input_tokens,omitempty"`
}

func anthropicUsageOf(r turnResult) anthropicUsage {
	return anthropicUsage{InputTokens: r.prefilledTokens, CacheReadInputTokens: r.cachedTokens, OutputTokens: r.decodedTokens,
		ApproximateCacheReadInputTokens: r.approxTokens, RecomputedInputTokens: r.recomputed}
}

// responsesUsage is the Responses API's usage object.
type responsesUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens            int `json:"cached_tokens"`                       // exact reuse only
		ApproximateCachedTokens int `json:"approximate_cached_tokens,omitempty"` // ctxd's
		RecomputedTokens        int `json:"recomputed_tokens,omitempty"`         // ctxd's
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

func responsesUsageOf(r turnResult) *responsesUsage {
	u := &responsesUsage{InputTokens: r.promptTokens, OutputTokens: r.decodedTokens, TotalTokens: r.promptTokens + r.decodedTokens}
	u.InputTokensDetails.CachedTokens = r.cachedTokens
	u.InputTokensDetails.ApproximateCachedTokens, u.InputTokensDetails.RecomputedTokens = r.approxTokens, r.recomputed
	return u
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
