package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/ctxd/ctxd/internal/chat"
)

// Ollama's /api endpoints. Streams are NDJSON and on by default, as in
// Ollama. prompt_eval_count counts the tokens actually evaluated;
// prompt_cache_count (ctxd's addition) the prompt tokens whose KV was
// reused.

type ollamaOptions struct {
	NumPredict  *int            `json:"num_predict"`
	Temperature *float64        `json:"temperature"`
	TopK        *int            `json:"top_k"`
	TopP        *float64        `json:"top_p"`
	Seed        *int64          `json:"seed"`
	Stop        json.RawMessage `json:"stop"`
}

type ollamaMessage struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	Thinking  string `json:"thinking,omitempty"`
	Images    []any  `json:"images,omitempty"`
	ToolCalls []struct {
		ID       string `json:"id,omitempty"`
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls,omitempty"`
	ToolName   string `json:"tool_name,omitempty"`
	ToolCallID string `json:"tool_call_id,omitempty"`
}

type ollamaChatRequest struct {
	Model    string          `json:"model"`
	Messages []ollamaMessage `json:"messages"`
	Tools    []oaiTool       `json:"tools"`
	Stream   *bool           `json:"stream"`
	Format   json.RawMessage `json:"format"`
	Options  ollamaOptions   `json:"options"`
}

type ollamaGenerateRequest struct {
	Model   string        `json:"model"`
	Prompt  string        `json:"prompt"`
	System  string        `json:"system"`
	Raw     bool          `json:"raw"`
	Stream  *bool         `json:"stream"`
	Options ollamaOptions `json:"options"`
	Images  []any         `json:"images"`
}

func (o ollamaOptions) params() (decodeParams, error) {
	var p decodeParams
	var err error
	if o.NumPredict != nil && *o.NumPredict > 0 {
		p.maxTokens = *o.NumPredict
	}
	if p.sampling, err = sampling(o.Temperature, o.TopP, o.TopK, o.Seed); err != nil {
		return p, err
	}
	p.stop, err = stopList(o.Stop)
	return p, err
}

func (s *Server) ollamaChat(w http.ResponseWriter, r *http.Request) {
	var req ollamaChatRequest
	if err := s.decodeBody(r, &req); err != nil {
		writeError(w, true, err)
		return
	}
	t, err := s.prepareOllamaChat(r.Context(), r.Header, &req)
	if err != nil {
		writeError(w, true, err)
		return
	}
	s.serveTurn(w, r, t, &ollamaDialect{chat: t.chat, model: t.model.id}, req.Stream == nil || *req.Stream)
}

func (s *Server) prepareOllamaChat(ctx context.Context, h http.Header, req *ollamaChatRequest) (*chatTurn, error) {
	mi, err := s.model(ctx, req.Model)
	if err != nil {
		return nil, err
	}
	if len(req.Format) > 0 && string(req.Format) != "null" && string(req.Format) != `""` {
		return nil, badRequest("format: structured output is not supported by ctxd")
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages: at least one message is required")
	}
	var msgs []chat.Message
	for i, m := range req.Messages {
		if len(m.Images) > 0 {
			return nil, badRequest("messages[%d]: images: ctxd serves text only", i)
		}
		switch m.Role {
		case "system", "user", "assistant", "tool":
		default:
			return nil, badRequest("messages[%d]: unknown role %q", i, m.Role)
		}
		cm := chat.Message{Role: m.Role, Content: m.Content, Reasoning: m.Thinking, Name: m.ToolName, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			cm.ToolCalls = append(cm.ToolCalls, chat.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: argumentsText(tc.Function.Arguments)})
		}
		msgs = append(msgs, cm)
	}
	tools, err := oaiTools(req.Tools)
	if err != nil {
		return nil, err
	}
	m, err := mi.tmpl.RenderContext(ctx, msgs, tools)
	if err != nil {
		return nil, renderError(mi.tmpl, err)
	}
	p, err := req.Options.params()
	if err != nil {
		return nil, err
	}
	return &chatTurn{model: mi, manifest: forDaemon(m, mi.tmpl), params: p, key: sessionKey(h, "", ""), family: familyText(msgs), tools: tools, chat: true}, nil
}

func (s *Server) ollamaGenerate(w http.ResponseWriter, r *http.Request) {
	var req ollamaGenerateRequest
	if err := s.decodeBody(r, &req); err != nil {
		writeError(w, true, err)
		return
	}
	mi, err := s.model(r.Context(), req.Model)
	if err != nil {
		writeError(w, true, err)
		return
	}
	if len(req.Images) > 0 {
		writeError(w, true, badRequest("images: ctxd serves text only"))
		return
	}
	if req.Prompt == "" {
		// Ollama answers an empty prompt by loading the model: it is loaded.
		writeJSON(w, map[string]any{"model": mi.id, "created_at": time.Now().UTC().Format(time.RFC3339Nano), "response": "", "done": true, "done_reason": "load"})
		return
	}
	m, err := mi.tmpl.RenderPrompt(req.System, req.Prompt, req.Raw)
	if err != nil {
		writeError(w, true, badRequest("prompt: %v", err))
		return
	}
	p, err := req.Options.params()
	if err != nil {
		writeError(w, true, err)
		return
	}
	t := &chatTurn{model: mi, manifest: forDaemon(m, mi.tmpl), params: p, key: sessionKey(r.Header, "", ""), family: req.System + "\n" + req.Prompt}
	s.serveTurn(w, r, t, &ollamaDialect{chat: t.chat, model: t.model.id}, req.Stream == nil || *req.Stream)
}

// validObject is s when it is a JSON value, else s as a JSON string.
func validObject(s string) string {
	if json.Valid([]byte(s)) {
		return s
	}
	b, _ := json.Marshal(s)
	return string(b)
}

func (s *Server) ollamaTag(mi *modelInfo) map[string]any {
	return map[string]any{"name": mi.id, "model": mi.id, "modified_at": mi.modified.UTC().Format(time.RFC3339Nano),
		"size": mi.weightsBytes, "digest": mi.digest,
		"details": map[string]any{"format": "gguf", "family": mi.arch, "families": []string{mi.arch}, "parameter_size": "", "quantization_level": ""}}
}

func (s *Server) ollamaTags(w http.ResponseWriter, r *http.Request) {
	mi, err := s.models.get(r.Context())
	if err != nil {
		writeError(w, true, err)
		return
	}
	writeJSON(w, map[string]any{"models": []any{s.ollamaTag(mi)}})
}

func (s *Server) ollamaShow(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model string `json:"model"`
		Name  string `json:"name"`
	}
	if err := s.decodeBody(r, &req); err != nil {
		writeError(w, true, err)
		return
	}
	if req.Model == "" {
		req.Model = req.Name
	}
	mi, err := s.model(r.Context(), req.Model)
	if err != nil {
		writeError(w, true, err)
		return
	}
	arch := mi.arch
	if arch == "" {
		arch = "llama"
	}
	tag := s.ollamaTag(mi)
	writeJSON(w, map[string]any{
		"modelfile":  fmt.Sprintf("FROM %s\n", filepath.Base(mi.path)), // the file's name only: where it lives is the host's business
		"parameters": fmt.Sprintf("num_ctx %d", mi.contextLength()),
		"template":   mi.tmpl.Name(),
		"details":    tag["details"],
		"model_info": map[string]any{
			"general.architecture":   arch,
			arch + ".context_length": mi.contextLength(),
			"ctxd.session_tokens":    mi.sessionTokens,
			"ctxd.trained_context":   mi.trainedContext,
			"ctxd.hot_set":           mi.hot,
		},
		"capabilities": []string{"completion", "tools"},
		"modified_at":  tag["modified_at"],
	})
}

// OllamaAPIVersion is the Ollama version whose API ctxd implements, as
// /api/version reports it: clients gate features on it (Codex's --oss
// needs 0.13.4 or newer for /v1/responses). ctxd's own version is reported
// beside it as ctxd_version.
const OllamaAPIVersion = "0.13.4"

func (s *Server) ollamaVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]any{"version": OllamaAPIVersion, "ctxd_version": s.cfg.Version})
}

func (s *Server) ollamaPS(w http.ResponseWriter, r *http.Request) {
	mi, err := s.models.get(r.Context())
	if err != nil {
		writeJSON(w, map[string]any{"models": []any{}})
		return
	}
	tag := s.ollamaTag(mi)
	tag["expires_at"] = time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339Nano)
	tag["size_vram"] = 0
	tag["context_length"] = mi.contextLength()
	var sessions []any
	for _, ls := range s.table.snapshot() {
		// Session keys (a client's prompt_cache_key, user or header) are
		// not shown: one client must not learn another's.
		sessions = append(sessions, map[string]any{"session": ls.id, "busy": ls.users > 0, "last_used": ls.lastUsed.UTC().Format(time.RFC3339Nano)})
	}
	tag["ctxd_sessions"] = sessions
	writeJSON(w, map[string]any{"models": []any{tag}})
}
