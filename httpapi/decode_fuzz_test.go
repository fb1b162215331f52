package httpapi

import (
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/ctxd/ctxd/internal/chat"
)

// Fuzz targets for the request decoders of the Anthropic Messages and
// Responses APIs: any body either decodes into messages the fallback
// template renders, or fails with a 400 naming the problem; never a panic.

func fallbackTemplate(t testing.TB) *chat.Template {
	tmpl, err := chat.NewTemplate(chat.ModelInfo{})
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// checkDecoded holds for every decoded conversation.
func checkDecoded(t *testing.T, tmpl *chat.Template, msgs []chat.Message, tools []chat.Tool, err error) {
	t.Helper()
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) || ae.status != 400 || !errors.Is(err, ErrBadRequest) {
			t.Fatalf("a decoder error is not a 400 bad request: %#v", err)
		}
		return
	}
	for i, m := range msgs {
		switch m.Role {
		case chat.RoleSystem, chat.RoleUser, chat.RoleAssistant, chat.RoleTool:
		default:
			t.Fatalf("message %d: role %q", i, m.Role)
		}
		if m.Role == chat.RoleSystem && i != 0 {
			t.Fatalf("a system message at %d", i)
		}
		for _, c := range m.ToolCalls {
			if c.Arguments == "" {
				t.Fatalf("message %d: a tool call without arguments text", i)
			}
		}
	}
	for _, tl := range tools {
		if tl.Name == "" || !json.Valid(tl.Parameters) {
			t.Fatalf("tool %+v", tl)
		}
	}
	valid := true
	for _, m := range msgs {
		valid = valid && utf8.ValidString(m.Content) && utf8.ValidString(m.Reasoning)
	}
	if _, err := tmpl.Render(msgs, tools); err != nil && valid && len(msgs) > 0 {
		t.Fatalf("decoded messages do not render: %v", err)
	}
}

func FuzzAnthropicRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`,
		`{"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.3.abc;"},{"type":"text","text":"You are Claude Code."}],"messages":[{"role":"system","content":"ctx"},{"role":"user","content":[{"type":"text","text":"read","cache_control":{"type":"ephemeral"}}]},{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"tool_use","id":"toolu_1","name":"Read","input":{"path":"a"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"data"}],"is_error":true},{"type":"text","text":"go on"}]}],"tools":[{"name":"Read","input_schema":{"type":"object"}},{"type":"web_search_20250305","name":"web_search"},{"type":"bash_20250124","name":"bash"}],"metadata":{"user_id":"{\"session_id\":\"s1\"}"},"thinking":{"type":"adaptive"}}`,
		`{"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`,
		`{"messages":[{"role":"tool","content":7}]}`,
	} {
		f.Add([]byte(seed))
	}
	tmpl := fallbackTemplate(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		var req antRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		if req.Metadata != nil {
			claudeSessionID(req.Metadata.UserID)
		}
		system, err := antSystem(req.System)
		var msgs []chat.Message
		if err == nil {
			msgs, err = antMessages(system, req.Messages)
		}
		var tools []chat.Tool
		if err == nil {
			tools, err = antTools(req.Tools)
		}
		checkDecoded(t, tmpl, msgs, tools, err)
	})
}

func FuzzResponsesRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","input":"hi"}`,
		`{"instructions":"be brief","input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"rules"}]},{"role":"user","content":"list"},{"type":"reasoning","summary":[],"encrypted_content":"x"},{"type":"function_call","call_id":"c1","name":"exec_command","arguments":"{\"cmd\":\"ls\"}"},{"type":"function_call_output","call_id":"c1","output":"a b"},{"type":"custom_tool_call","call_id":"c2","name":"apply_patch","input":"*** Begin"},{"type":"custom_tool_call_output","call_id":"c2","output":{"content":"ok"}},{"type":"local_shell_call","call_id":"c3","action":{"type":"exec","command":["ls"]}},{"type":"local_shell_call_output","call_id":"c3","output":"x"},{"type":"message","role":"assistant","id":"msg_1","content":[{"type":"output_text","text":"done"}]}],"tools":[{"type":"function","name":"exec_command","parameters":{"type":"object"}},{"type":"custom","name":"apply_patch","format":{"type":"grammar"}},{"type":"local_shell"},{"type":"web_search"},{"type":"namespace","name":"ns","tools":[]}],"prompt_cache_key":"t1","store":false}`,
		`{"input":[{"type":"item_reference","id":"x"}]}`,
		`{"input":[{"type":"message","role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`,
	} {
		f.Add([]byte(seed))
	}
	tmpl := fallbackTemplate(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		var req respRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		msgs, err := respMessages(req.Instructions, req.Input)
		var tools []chat.Tool
		if err == nil {
			tools, _, err = respTools(req.Tools)
		}
		checkDecoded(t, tmpl, msgs, tools, err)
	})
}
