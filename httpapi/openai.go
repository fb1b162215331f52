package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
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

// contentPart is one part of a message content given as an array.
type contentPart struct {
	Type    string `json:"type"`
	Text    string `json:"text"`
	Refusal string `json:"refusal"`
}

// contentParts reads a message content that is a string, null (both
// returned as text, parts nil) or an array of parts; anything else is a
// bad request saying what the content must be.
func contentParts(raw json.RawMessage, where, what string) (string, []contentPart, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", nil, badRequest("%s: content must be a string or an array of %s", where, what)
	}
	return "", parts, nil
}

// contentText joins a message content: a string, null, or an array of
// {"type":"text","text":...} parts.
func contentText(raw json.RawMessage, where string) (string, error) {
	s, parts, err := contentParts(raw, where, "text parts")
	if err != nil || parts == nil {
		return s, err
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

type oaiDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
	// ReasoningContent is a reasoning model's thinking, in the field
	// llama-server and DeepSeek's API use.
	ReasoningContent *string       `json:"reasoning_content,omitempty"`
	ToolCalls        []oaiToolCall `json:"tool_calls,omitempty"`
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
	key      string // the affinity key (sessionKey)
	family   string // the agent's own text of its conversation (familyText)
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
	s.serveTurn(w, r, t, newOpenAIDialect(t, req.StreamOptions != nil && req.StreamOptions.IncludeUsage), req.Stream)
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
	return &chatTurn{model: mi, manifest: forDaemon(m, mi.tmpl), params: p, key: sessionKey(h, req.PromptCacheKey, req.User), family: familyText(msgs), tools: tools, chat: true}, nil
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
	s.serveTurn(w, r, t, newOpenAIDialect(t, req.StreamOptions != nil && req.StreamOptions.IncludeUsage), req.Stream)
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
	return &chatTurn{model: mi, manifest: forDaemon(m, mi.tmpl), params: p, key: sessionKey(h, req.PromptCacheKey, req.User), family: prompt}, nil
}

func (s *Server) openaiModels(w http.ResponseWriter, r *http.Request) {
	mi, err := s.models.get(r.Context())
	if err != nil {
		writeError(w, false, err)
		return
	}
	if r.Header.Get("Anthropic-Version") != "" { // an Anthropic client lists models
		m := antModel(mi)
		writeJSON(w, map[string]any{"data": []any{m}, "has_more": false, "first_id": mi.id, "last_id": mi.id})
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
	if r.Header.Get("Anthropic-Version") != "" {
		writeJSON(w, antModel(mi))
		return
	}
	writeJSON(w, s.oaiModel(mi))
}

// antModel is the model in Anthropic's shape, with its context length.
func antModel(mi *modelInfo) map[string]any {
	return map[string]any{"type": "model", "id": mi.id, "display_name": mi.id, "created_at": mi.modified.UTC().Format(time.RFC3339),
		"max_input_tokens": mi.contextLength(), "max_tokens": mi.trainedContext}
}

func (s *Server) oaiModel(mi *modelInfo) map[string]any {
	return map[string]any{"id": mi.id, "object": "model", "created": mi.modified.Unix(), "owned_by": "ctxd",
		"context_length": mi.contextLength(), "max_model_len": mi.contextLength(),
		"meta": map[string]any{"n_ctx_train": mi.trainedContext, "session_tokens": mi.sessionTokens, "hot_set": mi.hot,
			"template": mi.tmpl.Name(), "digest": mi.digest, "size": mi.weightsBytes}}
}
