package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/ctxd/ctxd/internal/chat"
)

// Anthropic Messages (/v1/messages, /v1/messages/count_tokens), as Claude
// Code and the Anthropic SDKs send it. Unknown fields, betas (the ?beta
// query, anthropic-beta headers), thinking settings, cache_control markers
// and metadata are accepted and ignored: none of them reaches the prompt,
// so the prompt's prefix stays the same turn to turn and process to
// process.

type antRequest struct {
	Model         string          `json:"model"`
	Messages      []antMessage    `json:"messages"`
	System        json.RawMessage `json:"system"`
	MaxTokens     *int            `json:"max_tokens"`
	Stream        bool            `json:"stream"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	StopSequences []string        `json:"stop_sequences"`
	Tools         []antTool       `json:"tools"`
	ToolChoice    *struct {
		Type string `json:"type"`
	} `json:"tool_choice"`
	Metadata *struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
}

type antMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type antBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Thinking  string          `json:"thinking"`
}

type antTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// billingHeader starts the system block Claude Code writes first: a line
// whose checksum changes with every session's first prompt. It means
// nothing to the model and would make every session's prompt differ from
// the next one's at its first block, so ctxd drops it.
const billingHeader = "x-anthropic-billing-header:"

// antBlocks reads content: a string (one text block) or an array of blocks.
func antBlocks(raw json.RawMessage, where string) ([]antBlock, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return []antBlock{{Type: "text", Text: s}}, nil
	}
	var blocks []antBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, badRequest("%s: content must be a string or an array of content blocks", where)
	}
	return blocks, nil
}

// antSystem is the system prompt: a string or text blocks, joined with
// newlines, Claude Code's billing header dropped.
func antSystem(raw json.RawMessage) (string, error) {
	blocks, err := antBlocks(raw, "system")
	if err != nil {
		return "", err
	}
	var parts []string
	for i, b := range blocks {
		if b.Type != "text" {
			return "", badRequest("system[%d]: block type %q: the system prompt takes text blocks", i, b.Type)
		}
		if strings.HasPrefix(b.Text, billingHeader) {
			continue
		}
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n"), nil
}

// antToolResult is a tool_result's content as text.
func antToolResult(b antBlock, where string) (string, error) {
	inner, err := antBlocks(b.Content, where)
	if err != nil {
		return "", err
	}
	var parts []string
	for j, ib := range inner {
		switch ib.Type {
		case "text":
			parts = append(parts, ib.Text)
		case "image", "document":
			return "", badRequest("%s.content[%d]: %s blocks: ctxd serves text only", where, j, ib.Type)
		default:
			return "", badRequest("%s.content[%d]: block type %q inside a tool_result: ctxd takes text", where, j, ib.Type)
		}
	}
	text := strings.Join(parts, "\n")
	if b.IsError && !strings.HasPrefix(text, "Error") {
		text = "Error: " + text
	}
	return text, nil
}

// antMessages turns system and messages into chat messages: tool_use
// blocks become assistant tool calls, tool_result blocks tool messages
// (before the user's text of the same message), system messages after the
// first become user text, and neighbouring user texts merge.
func antMessages(system string, in []antMessage) ([]chat.Message, error) {
	if len(in) == 0 {
		return nil, badRequest("messages: at least one message is required")
	}
	var out []chat.Message
	if system != "" {
		out = append(out, chat.Message{Role: chat.RoleSystem, Content: system})
	}
	names := map[string]string{} // tool_use id -> tool name
	addUser := func(text string) {
		if n := len(out); n > 0 && out[n-1].Role == chat.RoleUser {
			out[n-1].Content += "\n\n" + text
			return
		}
		out = append(out, chat.Message{Role: chat.RoleUser, Content: text})
	}
	for i, m := range in {
		where := fmt.Sprintf("messages[%d]", i)
		blocks, err := antBlocks(m.Content, where)
		if err != nil {
			return nil, err
		}
		switch m.Role {
		case "system":
			var texts []string
			for j, b := range blocks {
				if b.Type != "text" {
					return nil, badRequest("%s.content[%d]: block type %q in a system message", where, j, b.Type)
				}
				if !strings.HasPrefix(b.Text, billingHeader) {
					texts = append(texts, b.Text)
				}
			}
			if text := strings.Join(texts, "\n"); text != "" {
				if len(out) == 0 {
					out = append(out, chat.Message{Role: chat.RoleSystem, Content: text})
				} else if out[len(out)-1].Role == chat.RoleSystem && len(out) == 1 {
					out[0].Content += "\n" + text
				} else {
					addUser(text)
				}
			}
		case "user":
			var texts []string
			for j, b := range blocks {
				bw := fmt.Sprintf("%s.content[%d]", where, j)
				switch b.Type {
				case "text":
					texts = append(texts, b.Text)
				case "tool_result":
					text, err := antToolResult(b, bw)
					if err != nil {
						return nil, err
					}
					out = append(out, chat.Message{Role: chat.RoleTool, Content: text, ToolCallID: b.ToolUseID, Name: names[b.ToolUseID]})
				case "image", "document":
					return nil, badRequest("%s: %s blocks: ctxd serves text only", bw, b.Type)
				default:
					return nil, badRequest("%s: block type %q in a user message (text, tool_result)", bw, b.Type)
				}
			}
			if len(texts) > 0 {
				addUser(strings.Join(texts, "\n"))
			}
		case "assistant":
			am := chat.Message{Role: chat.RoleAssistant}
			var texts []string
			for j, b := range blocks {
				switch b.Type {
				case "text":
					texts = append(texts, b.Text)
				case "thinking":
					am.Reasoning += b.Thinking
				case "redacted_thinking":
				case "tool_use", "server_tool_use":
					names[b.ID] = b.Name
					am.ToolCalls = append(am.ToolCalls, chat.ToolCall{ID: b.ID, Name: b.Name, Arguments: argumentsText(b.Input)})
				default:
					return nil, badRequest("%s.content[%d]: block type %q in an assistant message (text, thinking, tool_use)", where, j, b.Type)
				}
			}
			am.Content = strings.Join(texts, "\n")
			out = append(out, am)
		default:
			return nil, badRequest("%s: unknown role %q (user, assistant, system)", where, m.Role)
		}
	}
	return out, nil
}

// antServerTools are Anthropic's server tools: they run on Anthropic's
// side, so ctxd (which cannot run them) leaves them out of the prompt.
var antServerTools = regexp.MustCompile(`^(web_search|web_fetch|code_execution|tool_search)_`)

// antTools renders the tools a model can call: custom tools with their
// schemas, Anthropic-defined client tools (bash, text editor, memory…)
// with an open object schema; server tools are left out.
func antTools(in []antTool) ([]chat.Tool, error) {
	var out []chat.Tool
	for i, t := range in {
		if antServerTools.MatchString(t.Type) {
			continue
		}
		if t.Name == "" {
			return nil, badRequest("tools[%d]: name is required", i)
		}
		schema := t.InputSchema
		if len(schema) == 0 || string(schema) == "null" {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		out = append(out, chat.Tool{Name: t.Name, Description: t.Description, Parameters: schema})
	}
	return out, nil
}

// claudeSessionID is the session id inside metadata.user_id: Claude Code
// sends a JSON string ({"device_id":…,"session_id":…}) or, in older
// versions, "user_…_account_…_session_<uuid>".
func claudeSessionID(userID string) string {
	var v struct {
		SessionID string `json:"session_id"`
	}
	if json.Unmarshal([]byte(userID), &v) == nil && v.SessionID != "" {
		return v.SessionID
	}
	if _, after, ok := strings.Cut(userID, "_session_"); ok && after != "" {
		return after
	}
	return ""
}

// prepareAnthropic makes a turn of a Messages request.
func (s *Server) prepareAnthropic(ctx context.Context, h http.Header, req *antRequest) (*chatTurn, error) {
	mi, err := s.model(ctx, req.Model)
	if err != nil {
		return nil, err
	}
	system, err := antSystem(req.System)
	if err != nil {
		return nil, err
	}
	msgs, err := antMessages(system, req.Messages)
	if err != nil {
		return nil, err
	}
	tools, err := antTools(req.Tools)
	if err != nil {
		return nil, err
	}
	if req.ToolChoice != nil && req.ToolChoice.Type == "none" {
		tools = nil
	}
	m, err := mi.tmpl.RenderContext(ctx, msgs, tools)
	if err != nil {
		return nil, renderError(mi.tmpl, err)
	}
	var p decodeParams
	if req.MaxTokens != nil {
		if *req.MaxTokens < 1 {
			return nil, badRequest("max_tokens %d: must be at least 1", *req.MaxTokens)
		}
		p.maxTokens = *req.MaxTokens
	}
	if p.sampling, err = sampling(req.Temperature, req.TopP, req.TopK, nil); err != nil {
		return nil, err
	}
	for _, s := range req.StopSequences {
		if s != "" {
			p.stop = append(p.stop, s)
		}
	}
	var metaKey string
	if req.Metadata != nil {
		metaKey = claudeSessionID(req.Metadata.UserID)
	}
	return &chatTurn{model: mi, manifest: forDaemon(m, mi.tmpl), params: p, key: sessionKey(h, metaKey, ""),
		family: familyText(msgs), tools: tools, chat: true}, nil
}

func (s *Server) anthropicMessages(w http.ResponseWriter, r *http.Request) {
	req, t, ok := s.readAnthropic(w, r)
	if !ok {
		return
	}
	s.serveTurn(w, r, t, newAnthropicDialect(t, req.StopSequences), req.Stream)
}

// readAnthropic decodes and prepares a Messages request, answering an
// Anthropic error itself when it cannot (ok false).
func (s *Server) readAnthropic(w http.ResponseWriter, r *http.Request) (req antRequest, t *chatTurn, ok bool) {
	if err := s.decodeBody(r, &req); err != nil {
		writeAnthropicError(w, err)
		return req, nil, false
	}
	t, err := s.prepareAnthropic(r.Context(), r.Header, &req)
	if err != nil {
		writeAnthropicError(w, err)
		return req, nil, false
	}
	return req, t, true
}

// anthropicCountTokens answers /v1/messages/count_tokens: the tokens the
// request's prompt takes with the loaded model, nothing prefilled.
func (s *Server) anthropicCountTokens(w http.ResponseWriter, r *http.Request) {
	_, t, ok := s.readAnthropic(w, r)
	if !ok {
		return
	}
	n, err := s.backend.CountTokens(r.Context(), t.manifest)
	if err != nil {
		s.noteError(err)
		writeAnthropicError(w, err)
		return
	}
	writeJSON(w, map[string]any{"input_tokens": n})
}
