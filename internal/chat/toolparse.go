package chat

import (
	"strings"
)

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
		return passThrough{}
	}
	p := &streamParser{syntax: t.family.syntax, tools: make(map[string]Tool, len(tools))}
	for _, tl := range tools {
		p.tools[tl.Name] = tl
	}
	switch p.syntax {
	case syntaxHermes:
		p.openers = []string{hermesOpen}
	case syntaxQwenXML:
		p.openers = []string{hermesOpen, xmlFunctionOpen}
	case syntaxLlama3:
		p.openers = []string{pythonTag}
	case syntaxMistral:
		p.openers = []string{mistralOpen}
	}
	return p
}

// passThrough is the parser for requests without tools: all text is text.
type passThrough struct{}

func (passThrough) Feed(piece string) (string, []ToolCall) { return piece, nil }
func (passThrough) Flush() (string, []ToolCall)            { return "", nil }

// Markers of the tool-call syntaxes.
const (
	hermesOpen       = "<tool_call>"
	hermesClose      = "</tool_call>"
	xmlFunctionOpen  = "<function="
	xmlFunctionClose = "</function>"
	xmlParamOpen     = "<parameter="
	xmlParamClose    = "</parameter>"
	pythonTag        = "<|python_tag|>"
	mistralOpen      = "[TOOL_CALLS]"
	mistralArgs      = "[ARGS]"
	mistralCallID    = "[CALL_ID]"
)

// streamParser is the ToolParser of the syntaxes with tool calls. Outside a
// call it passes text through, holding back a tail that may begin an
// opener; inside one it buffers until the call is complete, then parses
// it: a call that does not parse goes out as text.
type streamParser struct {
	syntax  toolSyntax
	tools   map[string]Tool
	openers []string
	buf     string // text not yet returned
	inCall  bool   // buf starts with an opener
	// spoke is set once non-space text went out: Llama's bare JSON calls
	// are recognized only before it.
	spoke bool
}

// callStatus is what parsing a buffered call found.
type callStatus int

const (
	callIncomplete callStatus = iota // wait for more text
	callComplete                     // calls parsed from buf[:n]
	callInvalid                      // buf[:n] is text after all
)

func (p *streamParser) Feed(piece string) (string, []ToolCall) {
	p.buf += piece
	return p.step(false)
}

func (p *streamParser) Flush() (string, []ToolCall) {
	return p.step(true)
}

// step returns what buf decides now; with final, everything.
func (p *streamParser) step(final bool) (string, []ToolCall) {
	var text strings.Builder
	var calls []ToolCall
	out := func(s string) {
		text.WriteString(s)
		if strings.TrimSpace(s) != "" {
			p.spoke = true
		}
	}
	for p.buf != "" {
		if !p.inCall {
			i, hold := p.findOpener(final)
			if i < 0 {
				out(p.buf[:len(p.buf)-hold])
				p.buf = p.buf[len(p.buf)-hold:]
				break
			}
			out(p.buf[:i])
			p.buf = p.buf[i:]
			p.inCall = true
		}
		status, n, got := p.parseCall(final)
		switch status {
		case callIncomplete:
			if !final {
				return text.String(), calls
			}
			status, n = callInvalid, len(p.buf)
		case callComplete:
			calls = append(calls, got...)
			p.spoke = true
		}
		if status == callInvalid {
			out(p.buf[:n])
		}
		p.buf = p.buf[n:]
		p.inCall = false
	}
	return text.String(), calls
}

// findOpener returns where the first opener starts in buf, or -1 and how
// many bytes at the end of buf to hold back because they may begin one.
func (p *streamParser) findOpener(final bool) (at, hold int) {
	at = -1
	for _, o := range p.openers {
		if i := strings.Index(p.buf, o); i >= 0 && (at < 0 || i < at) {
			at = i
		}
	}
	if p.syntax == syntaxLlama3 && !p.spoke {
		// A Llama 3 call may be bare JSON: the reply, after spaces, is
		// an object.
		if j := len(p.buf) - len(strings.TrimLeft(p.buf, " \t\r\n")); j < len(p.buf) && p.buf[j] == '{' && (at < 0 || j < at) {
			at = j
		} else if j == len(p.buf) && !final {
			return -1, len(p.buf)
		}
	}
	if at >= 0 || final {
		return at, 0
	}
	for _, o := range p.openers {
		for k := min(len(o)-1, len(p.buf)); k > hold; k-- {
			if strings.HasSuffix(p.buf, o[:k]) {
				hold = k
				break
			}
		}
	}
	return -1, hold
}

// parseCall parses the call buf starts with.
func (p *streamParser) parseCall(final bool) (callStatus, int, []ToolCall) {
	switch p.syntax {
	case syntaxHermes:
		return p.parseHermes(final)
	case syntaxQwenXML:
		return p.parseXML(final)
	case syntaxLlama3:
		return p.parseLlama(final)
	case syntaxMistral:
		return p.parseMistral(final)
	}
	return callInvalid, len(p.buf), nil
}
