package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ctxd/ctxd/internal/chat"
	"github.com/ctxd/ctxd/policy"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// OpenAI Chat Completions and Completions, as agents send them.

type oaiChatRequest struct {
	Model               string          `json:"model"`
	Messages            []oaiMessage    `json:"messages"`
	Tools               []oaiTool       `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	Stream              bool            `json:"stream"`
	StreamOptions       *oaiStreamOpts  `json:"stream_options"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	N                   *int            `json:"n"`
	PromptCacheKey      string          `json:"prompt_cache_key"`
	User                string          `json:"user"`
}

type oaiStreamOpts struct {
	IncludeUsage bool `json:"include_usage"`
}

type oaiMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	ReasoningContent string          `json:"reasoning_content"`
	Reasoning        string          `json:"reasoning"`
	ToolCalls        []oaiToolCall   `json:"tool_calls"`
	ToolCallID       string          `json:"tool_call_id"`
	Name             string          `json:"name"`
}

type oaiToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type oaiTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// contentText joins a message content: a string, null, or an array of
// {"type":"text","text":...} parts.
func contentText(raw json.RawMessage, where string) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest("%s: content must be a string or an array of text parts", where)
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" && p.Type != "input_text" {
			return "", badRequest("%s: content part %d has type %q: ctxd serves text only", where, i, p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// argumentsText is tool-call arguments as JSON object text (clients send
// a string; some send the object itself).
func argumentsText(raw json.RawMessage) string {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s
	}
	if len(raw) == 0 || string(raw) == "null" {
		return "{}"
	}
	return string(raw)
}

func oaiMessages(in []oaiMessage) ([]chat.Message, error) {
	if len(in) == 0 {
		return nil, badRequest("messages: at least one message is required")
	}
	out := make([]chat.Message, 0, len(in))
	for i, m := range in {
		where := fmt.Sprintf("messages[%d]", i)
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool":
		default:
			return nil, badRequest("%s: unknown role %q (system, developer, user, assistant, tool)", where, m.Role)
		}
		text, err := contentText(m.Content, where)
		if err != nil {
			return nil, err
		}
		cm := chat.Message{Role: m.Role, Content: text, Reasoning: m.ReasoningContent, ToolCallID: m.ToolCallID, Name: m.Name}
		if m.Role == "developer" {
			cm.Role = "system"
		}
		if cm.Reasoning == "" {
			cm.Reasoning = m.Reasoning
		}
		for _, tc := range m.ToolCalls {
			cm.ToolCalls = append(cm.ToolCalls, chat.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: argumentsText(tc.Function.Arguments)})
		}
		out = append(out, cm)
	}
	return out, nil
}

func oaiTools(in []oaiTool) ([]chat.Tool, error) {
	var out []chat.Tool
	for i, t := range in {
		if t.Type != "" && t.Type != "function" {
			return nil, badRequest("tools[%d]: type %q: only function tools are supported", i, t.Type)
		}
		if t.Function.Name == "" {
			return nil, badRequest("tools[%d]: function.name is required", i)
		}
		out = append(out, chat.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	return out, nil
}

// stopList reads "stop": a string or an array of strings.
func stopList(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if s == "" {
			return nil, nil
		}
		return []string{s}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest("stop: must be a string or an array of strings")
	}
	var out []string
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// sampling maps OpenAI's knobs; without a temperature ctxd decodes
// greedily (agents send none, and greedy turns are reproducible).
func sampling(temp, topP *float64, topK *int, seed *int64) (*pb.SamplingParams, error) {
	sp := &pb.SamplingParams{}
	if temp != nil {
		if *temp < 0 || *temp > 2 {
			return nil, badRequest("temperature %g outside [0, 2]", *temp)
		}
		sp.Temperature = float32(*temp)
	}
	if topP != nil {
		if *topP <= 0 || *topP > 1 {
			return nil, badRequest("top_p %g outside (0, 1]", *topP)
		}
		sp.TopP = float32(*topP)
	}
	if topK != nil {
		if *topK < 0 {
			return nil, badRequest("top_k %d is negative", *topK)
		}
		sp.TopK = int32(*topK)
	}
	if seed != nil {
		sp.Seed = uint64(*seed)
	}
	return sp, nil
}

func maxTokensOf(a, b *int) (int, error) {
	for _, p := range []*int{a, b} {
		if p != nil {
			if *p < 1 {
				return 0, badRequest("max_tokens %d: must be at least 1", *p)
			}
			return *p, nil
		}
	}
	return 0, nil
}

func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

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

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

type oaiDelta struct {
	Role      string        `json:"role,omitempty"`
	Content   *string       `json:"content,omitempty"`
	ToolCalls []oaiToolCall `json:"tool_calls,omitempty"`
}

type oaiChunkChoice struct {
	Index        int      `json:"index"`
	Delta        oaiDelta `json:"delta"`
	FinishReason *string  `json:"finish_reason"`
	Logprobs     any      `json:"logprobs"`
}

type oaiChunk struct {
	ID      string           `json:"id"`
	Object  string           `json:"object"`
	Created int64            `json:"created"`
	Model   string           `json:"model"`
	Choices []oaiChunkChoice `json:"choices"`
	Usage   *oaiUsage        `json:"usage,omitempty"`
	Timings *oaiTimings      `json:"timings,omitempty"`
	Ctxd    *ctxdExtra       `json:"ctxd,omitempty"`
}

// ctxdExtra is what ctxd adds to a final chunk or response.
type ctxdExtra struct {
	Session         uint64 `json:"session"`
	SessionChoice   string `json:"session_choice"`
	ResumedSnapshot string `json:"resumed_snapshot,omitempty"`
	MaxTokensAsked  int    `json:"max_tokens_requested,omitempty"`
	MaxTokensGiven  int    `json:"max_tokens_granted,omitempty"`
}

func strp(s string) *string { return &s }

// clampHeader is the header (or trailer) that reports a clamped max_tokens.
const clampHeader = "X-Ctxd-Max-Tokens-Clamped"

func clampValue(r turnResult) string {
	return fmt.Sprintf("requested=%d granted=%d", r.requestedMax, r.grantedMax)
}

func toolCallsWire(calls []chat.ToolCall, first int) []oaiToolCall {
	out := make([]oaiToolCall, len(calls))
	for i, c := range calls {
		idx := first + i
		tc := oaiToolCall{Index: &idx, ID: c.ID, Type: "function"}
		if tc.ID == "" {
			tc.ID = newID("call_")
		}
		tc.Function.Name = c.Name
		tc.Function.Arguments, _ = json.Marshal(c.Arguments)
		out[i] = tc
	}
	return out
}

// chatTurn is one chat or completion request made ready to run.
type chatTurn struct {
	model    *modelInfo
	manifest policy.Manifest
	params   decodeParams
	key      string
	tools    []chat.Tool
	chat     bool // a chat (tool parsing) rather than a raw completion
}

func (s *Server) openaiChat(w http.ResponseWriter, r *http.Request) {
	var req oaiChatRequest
	if err := s.decodeBody(r, &req); err != nil {
		writeError(w, false, err)
		return
	}
	t, err := s.prepareOpenAIChat(r.Context(), r.Header, &req)
	if err != nil {
		writeError(w, false, err)
		return
	}
	s.serveOpenAI(w, r, t, req.Stream, req.StreamOptions != nil && req.StreamOptions.IncludeUsage, "chat.completion")
}

func (s *Server) prepareOpenAIChat(ctx context.Context, h http.Header, req *oaiChatRequest) (*chatTurn, error) {
	if req.N != nil && *req.N != 1 {
		return nil, badRequest("n %d: ctxd returns one choice", *req.N)
	}
	mi, err := s.model(ctx, req.Model)
	if err != nil {
		return nil, err
	}
	msgs, err := oaiMessages(req.Messages)
	if err != nil {
		return nil, err
	}
	tools, err := oaiTools(req.Tools)
	if err != nil {
		return nil, err
	}
	if string(req.ToolChoice) == `"none"` {
		tools = nil
	}
	m, err := mi.tmpl.RenderContext(ctx, msgs, tools)
	if err != nil {
		return nil, renderError(mi.tmpl, err)
	}
	p, err := openAIParams(req.MaxTokens, req.MaxCompletionTokens, req.Temperature, req.TopP, req.TopK, req.Seed, req.Stop)
	if err != nil {
		return nil, err
	}
	return &chatTurn{model: mi, manifest: forDaemon(m, mi.tmpl), params: p, key: sessionKey(h, req.PromptCacheKey, req.User), tools: tools, chat: true}, nil
}

func openAIParams(maxA, maxB *int, temp, topP *float64, topK *int, seed *int64, stop json.RawMessage) (decodeParams, error) {
	var p decodeParams
	var err error
	if p.maxTokens, err = maxTokensOf(maxA, maxB); err != nil {
		return p, err
	}
	if p.sampling, err = sampling(temp, topP, topK, seed); err != nil {
		return p, err
	}
	p.stop, err = stopList(stop)
	return p, err
}

// forDaemon readies a rendered manifest for the daemon: the chat template
// has already produced the text (and marked its control markers), so the
// daemon uses it as is under the template name "chat:<name>", which enters
// the compatibility key: KV of prompts rendered by another template never
// mixes with it. Raw prompts carry the same name, so one door session can
// serve both kinds of request; their texts have no control spans.
func forDaemon(m policy.Manifest, t *chat.Template) policy.Manifest {
	m.Template = "chat:" + t.Name()
	return m
}

type oaiCompletionRequest struct {
	Model          string          `json:"model"`
	Prompt         json.RawMessage `json:"prompt"`
	Stream         bool            `json:"stream"`
	StreamOptions  *oaiStreamOpts  `json:"stream_options"`
	MaxTokens      *int            `json:"max_tokens"`
	Temperature    *float64        `json:"temperature"`
	TopP           *float64        `json:"top_p"`
	TopK           *int            `json:"top_k"`
	Seed           *int64          `json:"seed"`
	Stop           json.RawMessage `json:"stop"`
	N              *int            `json:"n"`
	Echo           bool            `json:"echo"`
	PromptCacheKey string          `json:"prompt_cache_key"`
	User           string          `json:"user"`
}

func (s *Server) openaiCompletions(w http.ResponseWriter, r *http.Request) {
	var req oaiCompletionRequest
	if err := s.decodeBody(r, &req); err != nil {
		writeError(w, false, err)
		return
	}
	t, err := s.prepareCompletion(r.Context(), r.Header, &req)
	if err != nil {
		writeError(w, false, err)
		return
	}
	s.serveOpenAI(w, r, t, req.Stream, req.StreamOptions != nil && req.StreamOptions.IncludeUsage, "text_completion")
}

func (s *Server) prepareCompletion(ctx context.Context, h http.Header, req *oaiCompletionRequest) (*chatTurn, error) {
	if req.N != nil && *req.N != 1 {
		return nil, badRequest("n %d: ctxd returns one choice", *req.N)
	}
	if req.Echo {
		return nil, badRequest("echo is not supported")
	}
	mi, err := s.model(ctx, req.Model)
	if err != nil {
		return nil, err
	}
	var prompt string
	if err := json.Unmarshal(req.Prompt, &prompt); err != nil {
		var list []string
		if json.Unmarshal(req.Prompt, &list) != nil || len(list) != 1 {
			return nil, badRequest("prompt: must be a string (or an array of one string)")
		}
		prompt = list[0]
	}
	if prompt == "" {
		return nil, badRequest("prompt: must not be empty")
	}
	m, err := mi.tmpl.RenderPrompt("", prompt, true)
	if err != nil {
		return nil, badRequest("prompt: %v", err)
	}
	p, err := openAIParams(req.MaxTokens, nil, req.Temperature, req.TopP, req.TopK, req.Seed, req.Stop)
	if err != nil {
		return nil, err
	}
	if req.MaxTokens == nil {
		p.maxTokens = 16 // the Completions API's documented default
	}
	return &chatTurn{model: mi, manifest: forDaemon(m, mi.tmpl), params: p, key: sessionKey(h, req.PromptCacheKey, req.User)}, nil
}

// serveOpenAI runs a prepared turn and answers in OpenAI's shape: object
// "chat.completion" or "text_completion", streamed (SSE) or not.
func (s *Server) serveOpenAI(w http.ResponseWriter, r *http.Request, t *chatTurn, stream, includeUsage bool, object string) {
	ctx := r.Context()
	id := newID(map[bool]string{true: "chatcmpl-", false: "cmpl-"}[t.chat])
	created := time.Now().Unix()
	var parser chat.ToolParser
	if t.chat {
		parser = t.model.tmpl.NewToolParser(t.tools)
	}
	ls, how, err := s.table.acquire(ctx, t.key, t.manifest)
	if err != nil {
		writeError(w, false, err)
		return
	}
	extra := &ctxdExtra{Session: ls.id, SessionChoice: how}
	held := true
	defer func() {
		if held {
			s.table.release(ls, nil)
		}
	}()
	w.Header().Set("X-Ctxd-Session", strconv.FormatUint(ls.id, 10))

	if !stream {
		res, err := s.runTurn(ctx, ls, t.model, t.manifest, t.params, turnHooks{})
		if err != nil {
			writeError(w, false, err)
			return
		}
		held = false
		s.table.release(ls, segmentTexts(t.manifest))
		s.logTurn(ls, how, res)
		if res.clamped {
			w.Header().Set(clampHeader, clampValue(res))
			extra.MaxTokensAsked, extra.MaxTokensGiven = res.requestedMax, res.grantedMax
		}
		extra.ResumedSnapshot = res.resumed
		usage, timings := usageOf(res)
		text, calls := res.text, []chat.ToolCall(nil)
		if parser != nil {
			a, c := parser.Feed(text)
			b, d := parser.Flush()
			text, calls = a+b, append(c, d...)
		}
		finish := finishReason(res.reason, len(calls) > 0)
		out := map[string]any{"id": id, "object": object, "created": created, "model": t.model.id,
			"usage": usage, "timings": timings, "ctxd": extra, "system_fingerprint": "ctxd"}
		if t.chat {
			msg := map[string]any{"role": "assistant", "content": text}
			if len(calls) > 0 {
				msg["tool_calls"] = toolCallsWire(calls, 0)
				if text == "" {
					msg["content"] = nil
				}
			}
			out["choices"] = []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}}
		} else {
			out["choices"] = []any{map[string]any{"index": 0, "text": text, "finish_reason": finish, "logprobs": nil}}
		}
		writeJSON(w, out)
		return
	}

	chunk := func(d oaiDelta, finish *string) any {
		if !t.chat {
			c := map[string]any{"index": 0, "text": "", "finish_reason": finish, "logprobs": nil}
			if d.Content != nil {
				c["text"] = *d.Content
			}
			return map[string]any{"id": id, "object": object, "created": created, "model": t.model.id, "choices": []any{c}}
		}
		return oaiChunk{ID: id, Object: object + ".chunk", Created: created, Model: t.model.id, Choices: []oaiChunkChoice{{Delta: d, FinishReason: finish}}}
	}
	empty := func() any { return chunk(oaiDelta{Content: strp("")}, nil) }
	first := func() any { return chunk(oaiDelta{Role: "assistant", Content: strp("")}, nil) }
	sw := newStreamWriter(w, true, s.cfg.KeepAlive, empty)
	sw.header = func(h http.Header) { h.Set("Trailer", clampHeader) }
	defer sw.close()
	nCalls := 0
	sendText := func(text string, calls []chat.ToolCall) error {
		if text != "" {
			if err := sw.send(chunk(oaiDelta{Content: strp(text)}, nil)); err != nil {
				return err
			}
		}
		if len(calls) > 0 {
			if err := sw.send(chunk(oaiDelta{ToolCalls: toolCallsWire(calls, nCalls)}, nil)); err != nil {
				return err
			}
			nCalls += len(calls)
		}
		return nil
	}
	hooks := turnHooks{
		progress: func() { sw.begin(first()) },
		text: func(piece string) error {
			sw.begin(first())
			if parser == nil {
				return sendText(piece, nil)
			}
			return sendText(parser.Feed(piece))
		},
	}
	res, err := s.runTurn(ctx, ls, t.model, t.manifest, t.params, hooks)
	if err != nil {
		if !sw.isCommitted() {
			sw.close()
			writeError(w, false, err)
			return
		}
		held = false
		s.table.release(ls, nil)
		if err, ok := s.streamCut(ctx, err); ok {
			ae := toAPIError(err)
			sw.send(map[string]any{"error": map[string]any{"message": ae.message, "type": ae.typ, "code": ae.code}})
			sw.raw([]byte("[DONE]"))
		}
		return
	}
	held = false
	s.table.release(ls, segmentTexts(t.manifest))
	s.logTurn(ls, how, res)
	sw.close() // no keep-alive after the last chunks
	sw.begin(first())
	if parser != nil {
		if err := sendText(parser.Flush()); err != nil {
			return
		}
	}
	if res.clamped {
		extra.MaxTokensAsked, extra.MaxTokensGiven = res.requestedMax, res.grantedMax
	}
	extra.ResumedSnapshot = res.resumed
	usage, timings := usageOf(res)
	finish := finishReason(res.reason, nCalls > 0)
	last := chunk(oaiDelta{}, &finish)
	if c, ok := last.(oaiChunk); ok {
		c.Timings, c.Ctxd = timings, extra
		last = c
	}
	sw.send(last)
	if includeUsage {
		sw.send(oaiChunk{ID: id, Object: object + ".chunk", Created: created, Model: t.model.id, Choices: []oaiChunkChoice{}, Usage: usage, Timings: timings})
	}
	sw.raw([]byte("[DONE]"))
	if res.clamped {
		w.Header().Set(clampHeader, clampValue(res))
	}
}

func (s *Server) logTurn(ls *liveSession, how string, r turnResult) {
	s.log.Debug("HTTP turn", "session", ls.id, "key", ls.key, "chosen_by", how, "prompt_tokens", r.promptTokens,
		"cached_tokens", r.cachedTokens, "prefilled", r.prefilledTokens, "prompt_ms", ms(r.promptDur),
		"decoded", r.decodedTokens, "decode_ms", ms(r.decodeDur), "reason", r.reason.String())
}

func (s *Server) openaiModels(w http.ResponseWriter, r *http.Request) {
	mi, err := s.models.get(r.Context())
	if err != nil {
		writeError(w, false, err)
		return
	}
	writeJSON(w, map[string]any{"object": "list", "data": []any{s.oaiModel(mi)}})
}

func (s *Server) openaiModel(w http.ResponseWriter, r *http.Request) {
	mi, err := s.model(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, false, err)
		return
	}
	writeJSON(w, s.oaiModel(mi))
}

func (s *Server) oaiModel(mi *modelInfo) map[string]any {
	return map[string]any{"id": mi.id, "object": "model", "created": mi.modified.Unix(), "owned_by": "ctxd",
		"context_length": mi.sessionTokens, "max_model_len": mi.sessionTokens,
		"meta": map[string]any{"n_ctx_train": mi.trainedContext, "session_tokens": mi.sessionTokens, "hot_set": mi.hot,
			"template": mi.tmpl.Name(), "digest": mi.digest, "size": mi.weightsBytes}}
}
