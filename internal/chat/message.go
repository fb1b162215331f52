package chat

import "encoding/json"

// Message is one chat message as the OpenAI / Ollama APIs carry it,
// normalized by the HTTP door: content arrays of {"type":"text"} parts are
// joined; tool-call arguments are JSON object text.
type Message struct {
	Role       string     // "system", "user", "assistant", "tool"
	Content    string     // the message text
	Reasoning  string     // reasoning_content / thinking echoed back by agents
	ToolCalls  []ToolCall // assistant tool calls
	ToolCallID string     // tool results: the call answered
	Name       string     // tool results: the tool's name when given
}

// ToolCall is one call of a function tool.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // JSON object text
}

// Tool is a function tool definition.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage // JSON schema
}

// Message roles.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)
