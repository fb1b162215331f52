package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/ctxd/ctxd/internal/chat"
)

// OpenAI Responses (/v1/responses), as Codex and the OpenAI SDKs send it.
// ctxd keeps no response objects: every request carries its whole
// conversation (store:false, as Codex sends it), and the ids of items the
// client echoes back play no part in choosing a session. Reasoning items,
// include, text and reasoning settings, metadata and hosted tools (web
// search and the like, which ctxd cannot run) are accepted and left out
// of the prompt.

type respRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       string          `json:"instructions"`
	Tools              []respTool      `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	Stream             bool            `json:"stream"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	PromptCacheKey     string          `json:"prompt_cache_key"`
	PreviousResponseID string          `json:"previous_response_id"`
	User               string          `json:"user"`
}

type respItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Input     string          `json:"input"`
	Output    json.RawMessage `json:"output"`
	Action    *struct {
		Command          []string          `json:"command"`
		WorkingDirectory string            `json:"working_directory,omitempty"`
		TimeoutMS        *int              `json:"timeout_ms,omitempty"`
		Env              map[string]string `json:"env,omitempty"`
	} `json:"action"`
}

type respTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Tool kinds of the Responses API that the model can call through ctxd:
// each is rendered as a function and its calls come back as the item type
// the client expects.
const (
	toolFunction   = "function"
	toolCustom     = "custom"      // freeform input: rendered with one string parameter "input"
	toolLocalShell = "local_shell" // rendered with a command array
)

const (
	customSchema     = `{"type":"object","properties":{"input":{"type":"string","description":"The tool's whole input, as free text."}},"required":["input"]}`
	localShellSchema = `{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"},"description":"The command and its arguments."},"workdir":{"type":"string"},"timeout_ms":{"type":"integer"}},"required":["command"]}`
)

// respTools renders the tools and says which kind each callable name is;
// hosted tools (web_search, file_search, …) are accepted and left out.
func respTools(in []respTool) ([]chat.Tool, map[string]string, error) {
	var out []chat.Tool
	kinds := map[string]string{}
	for i, t := range in {
		switch t.Type {
		case "function", "":
			if t.Name == "" {
				return nil, nil, badRequest("tools[%d]: name is required", i)
			}
			params := t.Parameters
			if len(params) == 0 || string(params) == "null" {
				params = json.RawMessage(`{"type":"object","properties":{}}`)
			}
			out = append(out, chat.Tool{Name: t.Name, Description: t.Description, Parameters: params})
			kinds[t.Name] = toolFunction
		case "custom":
			if t.Name == "" {
				return nil, nil, badRequest("tools[%d]: name is required", i)
			}
			out = append(out, chat.Tool{Name: t.Name, Description: t.Description, Parameters: json.RawMessage(customSchema)})
			kinds[t.Name] = toolCustom
		case "local_shell":
			out = append(out, chat.Tool{Name: "local_shell", Description: "Runs a command on the user's machine.", Parameters: json.RawMessage(localShellSchema)})
			kinds["local_shell"] = toolLocalShell
		}
	}
	return out, kinds, nil
}

// respText is a message's content: a string or an array of text parts.
func respText(raw json.RawMessage, where string) (string, error) {
	s, parts, err := contentParts(raw, where, "content parts")
	if err != nil || parts == nil {
		return s, err
	}
	var b strings.Builder
	for i, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			b.WriteString(p.Text)
		case "refusal":
			b.WriteString(p.Refusal)
		case "input_image", "input_file", "input_audio":
			return "", badRequest("%s: content part %d has type %q: ctxd serves text only", where, i, p.Type)
		default:
			return "", badRequest("%s: content part %d has unknown type %q", where, i, p.Type)
		}
	}
	return b.String(), nil
}

// respMessages turns instructions and input items into chat messages:
// instructions and the leading system/developer messages become the
// system prompt, later ones user text; calls join the assistant message
// before them; call outputs become tool messages.
func respMessages(instructions string, input json.RawMessage) ([]chat.Message, error) {
	var items []respItem
	var s string
	switch {
	case len(input) == 0 || string(input) == "null":
	case json.Unmarshal(input, &s) == nil:
		items = []respItem{{Type: "message", Role: "user", Content: input}}
	default:
		if err := json.Unmarshal(input, &items); err != nil {
			return nil, badRequest("input: must be a string or an array of items")
		}
	}
	var out []chat.Message
	var system []string
	if instructions != "" {
		system = append(system, instructions)
	}
	names := map[string]string{} // call id -> tool name
	addCall := func(c chat.ToolCall) {
		if n := len(out); n > 0 && out[n-1].Role == chat.RoleAssistant {
			out[n-1].ToolCalls = append(out[n-1].ToolCalls, c)
			return
		}
		out = append(out, chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{c}})
	}
	for i, it := range items {
		where := fmt.Sprintf("input[%d]", i)
		typ := it.Type
		if typ == "" && it.Role != "" {
			typ = "message"
		}
		switch typ {
		case "message":
			text, err := respText(it.Content, where)
			if err != nil {
				return nil, err
			}
			switch it.Role {
			case "system", "developer":
				if len(out) == 0 {
					system = append(system, text)
				} else {
					out = append(out, chat.Message{Role: chat.RoleUser, Content: text})
				}
			case "user":
				out = append(out, chat.Message{Role: chat.RoleUser, Content: text})
			case "assistant":
				out = append(out, chat.Message{Role: chat.RoleAssistant, Content: text})
			default:
				return nil, badRequest("%s: unknown role %q (system, developer, user, assistant)", where, it.Role)
			}
		case "function_call":
			names[it.CallID] = it.Name
			addCall(chat.ToolCall{ID: it.CallID, Name: it.Name, Arguments: argumentsText(it.Arguments)})
		case "custom_tool_call":
			names[it.CallID] = it.Name
			args, _ := json.Marshal(map[string]string{"input": it.Input})
			addCall(chat.ToolCall{ID: it.CallID, Name: it.Name, Arguments: string(args)})
		case "local_shell_call":
			names[it.CallID] = "local_shell"
			args := []byte("{}")
			if it.Action != nil {
				args, _ = json.Marshal(map[string]any{"command": it.Action.Command})
			}
			addCall(chat.ToolCall{ID: it.CallID, Name: "local_shell", Arguments: string(args)})
		case "function_call_output", "custom_tool_call_output", "local_shell_call_output":
			text, err := respOutput(it.Output, where)
			if err != nil {
				return nil, err
			}
			out = append(out, chat.Message{Role: chat.RoleTool, Content: text, ToolCallID: it.CallID, Name: names[it.CallID]})
		case "reasoning", "web_search_call", "file_search_call", "image_generation_call", "code_interpreter_call", "computer_call", "mcp_list_tools", "mcp_call":
			// The model's hidden reasoning and hosted tools' records:
			// nothing of them is rendered.
		case "item_reference":
			return nil, badRequest("%s: item_reference: ctxd keeps no response items; send the items themselves (store:false)", where)
		default:
			return nil, badRequest("%s: unknown item type %q", where, it.Type)
		}
	}
	if len(system) > 0 {
		out = append([]chat.Message{{Role: chat.RoleSystem, Content: strings.Join(system, "\n\n")}}, out...)
	}
	if len(out) == 0 || (len(out) == 1 && out[0].Role == chat.RoleSystem) {
		return nil, badRequest("input: at least one input item is required")
	}
	return out, nil
}

// respOutput is a call output: a string or an array of content parts.
func respOutput(raw json.RawMessage, where string) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	// Codex sends {"content": …, "success": …} for some outputs.
	var obj struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err == nil && len(obj.Content) > 0 {
		return respText(obj.Content, where+".output")
	}
	return respText(raw, where+".output")
}

// prepareResponses makes a turn of a Responses request.
func (s *Server) prepareResponses(ctx context.Context, h http.Header, req *respRequest) (*chatTurn, map[string]string, error) {
	if req.PreviousResponseID != "" {
		return nil, nil, badRequest("previous_response_id: ctxd keeps no responses; send the whole conversation as input (store:false) — the KV of what it shares with earlier requests is reused all the same")
	}
	mi, err := s.model(ctx, req.Model)
	if err != nil {
		return nil, nil, err
	}
	msgs, err := respMessages(req.Instructions, req.Input)
	if err != nil {
		return nil, nil, err
	}
	tools, kinds, err := respTools(req.Tools)
	if err != nil {
		return nil, nil, err
	}
	if string(req.ToolChoice) == `"none"` {
		tools = nil
	}
	m, err := mi.tmpl.RenderContext(ctx, msgs, tools)
	if err != nil {
		return nil, nil, renderError(mi.tmpl, err)
	}
	var p decodeParams
	if req.MaxOutputTokens != nil {
		if *req.MaxOutputTokens < 1 {
			return nil, nil, badRequest("max_output_tokens %d: must be at least 1", *req.MaxOutputTokens)
		}
		p.maxTokens = *req.MaxOutputTokens
	}
	if p.sampling, err = sampling(req.Temperature, req.TopP, nil, nil); err != nil {
		return nil, nil, err
	}
	return &chatTurn{model: mi, manifest: forDaemon(m, mi.tmpl), params: p, key: sessionKey(h, req.PromptCacheKey, req.User),
		family: familyText(msgs), tools: tools, chat: true}, kinds, nil
}

func (s *Server) responsesCreate(w http.ResponseWriter, r *http.Request) {
	var req respRequest
	if err := s.decodeBody(r, &req); err != nil {
		writeError(w, false, err)
		return
	}
	t, kinds, err := s.prepareResponses(r.Context(), r.Header, &req)
	if err != nil {
		writeError(w, false, err)
		return
	}
	s.serveTurn(w, r, t, newResponsesDialect(t, kinds, &req), req.Stream)
}

// responsesGet answers GET /v1/responses/{id}: ctxd stores no responses.
func (s *Server) responsesGet(w http.ResponseWriter, r *http.Request) {
	writeError(w, false, &apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "not_found",
		message: fmt.Sprintf("response %q not found: ctxd stores no responses (store:false)", r.PathValue("id")), cause: ErrNotFound})
}
