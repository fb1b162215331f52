package chat

import "strings"

// toolSyntax is how a template family writes tool calls in model output.
type toolSyntax int

const (
	syntaxNone    toolSyntax = iota // no tool calls: output is text
	syntaxHermes                    // <tool_call>{"name":..,"arguments":..}</tool_call>
	syntaxQwenXML                   // <tool_call><function=name><parameter=x>v</parameter></function></tool_call>
	syntaxLlama3                    // {"name":..,"parameters":..} or <|python_tag|>
	syntaxMistral                   // [TOOL_CALLS][{"name":..,"arguments":..}]
)

// family is a template family: its name and its tool-call syntax.
type family struct {
	name   string
	syntax toolSyntax
}

// detectFamily recognizes a template family by the markers its text
// writes. The order matters: Qwen3-Coder's XML calls sit inside
// <tool_call>, as Hermes calls do.
func detectFamily(tmpl string) family {
	has := func(s string) bool { return strings.Contains(tmpl, s) }
	switch {
	case has("<tool_call>") && has("<function=") && has("<parameter="):
		return family{"qwen3-coder", syntaxQwenXML}
	case has("<tool_call>"):
		return family{"hermes", syntaxHermes}
	case has("[TOOL_CALLS]"):
		return family{"mistral", syntaxMistral}
	case has("<|start_header_id|>"):
		return family{"llama3", syntaxLlama3}
	case has("<|im_start|>"):
		return family{"chatml", syntaxNone}
	}
	return family{"jinja", syntaxNone}
}
