package chat

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// The fallback template, for models without tokenizer.chat_template (such
// as stories260K). It is ChatML's layout written as plain text markers:
//
//	<|im_start|>system
//	SYSTEM TEXT
//
//	# Tools
//	To call a function, reply with <tool_call>{"name": NAME, "arguments": {ARGS}}</tool_call>.
//	<tools>
//	{"type": "function", "function": {"name": ..., "description": ..., "parameters": ...}}
//	</tools><|im_end|>
//	<|im_start|>user
//	USER TEXT<|im_end|>
//	<|im_start|>assistant
//	REPLY
//	<tool_call>
//	{"name": NAME, "arguments": ARGS}
//	</tool_call><|im_end|>
//	<|im_start|>tool
//	RESULT<|im_end|>
//	<|im_start|>assistant
//
// The system block appears when there is a system message or tools; tool
// calls use the Hermes syntax, so the Hermes parser reads them back;
// reasoning echoed by agents is not rendered. The markers are ordinary text
// to a model that has no such special tokens, and "<|im_end|>" is the stop
// string.
const (
	fallbackStart = "<|im_start|>"
	fallbackEnd   = "<|im_end|>"
)

// newFallback returns the fallback template.
func newFallback(info ModelInfo) *Template {
	stops := []string{fallbackEnd}
	if info.EOS != "" && info.EOS != fallbackEnd {
		stops = append(stops, info.EOS)
	}
	return &Template{
		name:    "fallback",
		family:  family{"fallback", syntaxHermes},
		stops:   stops,
		render:  renderFallback,
		markers: []string{fallbackStart, fallbackEnd},
	}
}

// renderFallback renders msgs and tools in the fallback layout.
func renderFallback(_ context.Context, msgs []Message, tools []Tool, gen bool) (string, error) {
	var b strings.Builder
	rest := msgs
	if len(msgs) > 0 && msgs[0].Role == RoleSystem || len(tools) > 0 {
		b.WriteString(fallbackStart + "system\n")
		if len(msgs) > 0 && msgs[0].Role == RoleSystem {
			b.WriteString(msgs[0].Content)
			rest = msgs[1:]
			if len(tools) > 0 {
				b.WriteString("\n\n")
			}
		}
		if len(tools) > 0 {
			b.WriteString("# Tools\nTo call a function, reply with <tool_call>{\"name\": NAME, \"arguments\": {ARGS}}</tool_call>.\n<tools>")
			for _, t := range tools {
				d, err := toolJSON(t)
				if err != nil {
					return "", err
				}
				b.WriteString("\n")
				b.WriteString(d)
			}
			b.WriteString("\n</tools>")
		}
		b.WriteString(fallbackEnd + "\n")
	}
	for _, m := range rest {
		switch m.Role {
		case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		default:
			return "", fmt.Errorf("%w: unknown role %q", ErrMessages, m.Role)
		}
		b.WriteString(fallbackStart + m.Role + "\n")
		b.WriteString(m.Content)
		for _, c := range m.ToolCalls {
			if !json.Valid([]byte(orEmptyObject(c.Arguments))) {
				return "", fmt.Errorf("%w: tool call %q: arguments are not JSON", ErrMessages, c.Name)
			}
			name, _ := json.Marshal(c.Name)
			fmt.Fprintf(&b, "\n<tool_call>\n{\"name\": %s, \"arguments\": %s}\n</tool_call>", name, orEmptyObject(c.Arguments))
		}
		b.WriteString(fallbackEnd + "\n")
	}
	if gen {
		b.WriteString(fallbackStart + "assistant\n")
	}
	return b.String(), nil
}

// orEmptyObject returns s, or "{}" when s is blank.
func orEmptyObject(s string) string {
	if strings.TrimSpace(s) == "" {
		return "{}"
	}
	return s
}

// toolJSON writes t as an OpenAI function tool in JSON.
func toolJSON(t Tool) (string, error) {
	params := t.Parameters
	if len(params) == 0 {
		params = json.RawMessage(`{}`)
	}
	if !json.Valid(params) {
		return "", fmt.Errorf("%w: tool %q: parameters are not JSON", ErrMessages, t.Name)
	}
	name, _ := json.Marshal(t.Name)
	desc, _ := json.Marshal(t.Description)
	return fmt.Sprintf(`{"type": "function", "function": {"name": %s, "description": %s, "parameters": %s}}`, name, desc, params), nil
}
