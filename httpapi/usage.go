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

// oaiUsage is usage with llama-server-style timings.
type oaiUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type oaiTimings struct {
	CacheN              int     `json:"cache_n"`
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
	t := &oaiTimings{CacheN: r.cachedTokens, PromptN: r.prefilledTokens, PromptMS: ms(r.promptDur), PredictedN: r.decodedTokens, PredictedMS: ms(r.decodeDur)}
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
		"load_duration":        0,
		"prompt_eval_count":    r.prefilledTokens,
		"prompt_eval_duration": r.promptDur.Nanoseconds(),
		"prompt_cache_count":   r.cachedTokens,
		"prompt_tokens":        r.promptTokens,
		"eval_count":           r.decodedTokens,
		"eval_duration":        r.decodeDur.Nanoseconds(),
	}
}

// anthropicUsage is Anthropic's usage object.
type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

func anthropicUsageOf(r turnResult) anthropicUsage {
	return anthropicUsage{InputTokens: r.prefilledTokens, CacheReadInputTokens: r.cachedTokens, OutputTokens: r.decodedTokens}
}

// responsesUsage is the Responses API's usage object.
type responsesUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
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
	return u
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
