package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// newCallID returns a fresh tool call ID.
func newCallID() string { return fmt.Sprintf("call_%016x", rand.Uint64()) }

// jsonEnd returns the length of the JSON object or array s starts with, or
// -1 when s ends before it does. It only balances brackets outside
// strings; the value is checked when decoded.
func jsonEnd(s string) int {
	depth, inString, escaped := 0, false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

// jsonCall decodes one call object: {"name": N, "arguments": A} (Hermes,
// Mistral) or {"name": N, "parameters": A} (Llama), A an object or a
// string holding one, plus an optional "id".
func jsonCall(raw []byte) (ToolCall, bool) {
	var c struct {
		Name       string          `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
		ID         string          `json:"id"`
	}
	if err := json.Unmarshal(raw, &c); err != nil || c.Name == "" {
		return ToolCall{}, false
	}
	args := c.Arguments
	if len(args) == 0 {
		args = c.Parameters
	}
	a, ok := argumentsJSON(args)
	if !ok {
		return ToolCall{}, false
	}
	id := c.ID
	if id == "" {
		id = newCallID()
	}
	return ToolCall{ID: id, Name: c.Name, Arguments: a}, true
}

// argumentsJSON returns arguments as compact JSON object text: raw is an
// object, a string holding one, or absent ({}).
func argumentsJSON(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "{}", true
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		raw = []byte(strings.TrimSpace(s))
	}
	if len(raw) == 0 || raw[0] != '{' {
		return "", false
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return "", false
	}
	return b.String(), true
}

// parseHermes parses <tool_call>{json}</tool_call>.
func (p *streamParser) parseHermes(final bool) (callStatus, int, []ToolCall) {
	end := strings.Index(p.buf, hermesClose)
	body, n := "", 0
	switch {
	case end >= 0:
		body, n = p.buf[len(hermesOpen):end], end+len(hermesClose)
	case final:
		// The model stopped before closing the tag: a complete object
		// is still a call.
		body, n = p.buf[len(hermesOpen):], len(p.buf)
	default:
		return callIncomplete, 0, nil
	}
	c, ok := jsonCall([]byte(strings.TrimSpace(body)))
	if !ok {
		return callInvalid, n, nil
	}
	return callComplete, n, []ToolCall{c}
}

// parseLlama parses a JSON call, bare or after <|python_tag|>; calls after
// the tag may be separated by ";".
func (p *streamParser) parseLlama(final bool) (callStatus, int, []ToolCall) {
	start := 0
	tagged := strings.HasPrefix(p.buf, pythonTag)
	if tagged {
		start = len(pythonTag)
	}
	var calls []ToolCall
	for {
		rest := p.buf[start:]
		trimmed := strings.TrimLeft(rest, " \t\r\n")
		if trimmed == "" {
			if final && len(calls) > 0 {
				return callComplete, len(p.buf), calls
			}
			if final {
				return callInvalid, len(p.buf), nil
			}
			return callIncomplete, 0, nil
		}
		if trimmed[0] != '{' {
			if len(calls) > 0 {
				return callComplete, start, calls
			}
			// Not JSON after the tag (Llama's built-in tools write
			// Python there): the tag is text, and what follows is
			// read again.
			return callInvalid, start, nil
		}
		off := start + len(rest) - len(trimmed)
		n := jsonEnd(trimmed)
		if n < 0 {
			if final {
				return callInvalid, len(p.buf), nil
			}
			return callIncomplete, 0, nil
		}
		c, ok := jsonCall([]byte(trimmed[:n]))
		if ok && !tagged {
			_, ok = p.tools[c.Name] // bare JSON is a call only of a known tool
		}
		if !ok {
			if len(calls) > 0 {
				return callComplete, start, calls
			}
			return callInvalid, off + n, nil
		}
		calls = append(calls, c)
		start = off + n
		// Another call follows after ";" (or only spaces).
		after := strings.TrimLeft(p.buf[start:], " \t\r\n")
		if strings.HasPrefix(after, ";") {
			start = len(p.buf) - len(after) + 1
			continue
		}
		if after == "" && !final {
			return callIncomplete, 0, nil
		}
		if after != "" && after[0] == '{' {
			start = len(p.buf) - len(after)
			continue
		}
		return callComplete, start, calls
	}
}

// parseMistral parses [TOOL_CALLS][{json}, ...] (Mistral v3, Nemo) and
// [TOOL_CALLS]name[CALL_ID]id[ARGS]{json} / [TOOL_CALLS]name[ARGS]{json}
// (Mistral Small 3.2, Magistral, Devstral).
func (p *streamParser) parseMistral(final bool) (callStatus, int, []ToolCall) {
	rest := p.buf[len(mistralOpen):]
	trimmed := strings.TrimLeft(rest, " \t\r\n")
	off := len(p.buf) - len(trimmed)
	incomplete := func() (callStatus, int, []ToolCall) {
		if final {
			return callInvalid, len(p.buf), nil
		}
		return callIncomplete, 0, nil
	}
	if trimmed == "" {
		return incomplete()
	}
	if trimmed[0] == '[' {
		n := jsonEnd(trimmed)
		if n < 0 {
			return incomplete()
		}
		var items []json.RawMessage
		if json.Unmarshal([]byte(trimmed[:n]), &items) != nil || len(items) == 0 {
			return callInvalid, off + n, nil
		}
		var calls []ToolCall
		for _, it := range items {
			c, ok := jsonCall(it)
			if !ok {
				return callInvalid, off + n, nil
			}
			calls = append(calls, c)
		}
		return callComplete, off + n, calls
	}
	// name[CALL_ID]id[ARGS]{json}: decided as the text arrives, so that a
	// call that is not one gives back the same text however it streams.
	// Anything else makes the marker text, and what follows is read again.
	invalid := func() (callStatus, int, []ToolCall) { return callInvalid, len(mistralOpen), nil }
	word := func(s string) (string, string, bool) { // a name or an id, up to "["
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c == '[' {
				return s[:i], s[i:], true
			}
			if !(c == '_' || c == '-' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				return "", "", false
			}
		}
		return s, "", true
	}
	name, rest, ok := word(trimmed)
	if !ok {
		return invalid()
	}
	if rest == "" {
		return incomplete()
	}
	id := ""
	if strings.HasPrefix(rest, mistralCallID) {
		if id, rest, ok = word(rest[len(mistralCallID):]); !ok {
			return invalid()
		}
		if rest == "" {
			return incomplete()
		}
	}
	if !strings.HasPrefix(rest, mistralArgs) {
		if len(rest) < len(mistralCallID) && (strings.HasPrefix(mistralArgs, rest) || strings.HasPrefix(mistralCallID, rest)) {
			return incomplete()
		}
		return invalid()
	}
	if name == "" {
		return invalid()
	}
	args := strings.TrimLeft(rest[len(mistralArgs):], " \t\r\n")
	argsOff := len(p.buf) - len(args)
	if args == "" {
		return incomplete()
	}
	if args[0] != '{' {
		return invalid()
	}
	n := jsonEnd(args)
	if n < 0 {
		return incomplete()
	}
	argText, ok := argumentsJSON(json.RawMessage(args[:n]))
	if !ok {
		return callInvalid, argsOff + n, nil
	}
	if id == "" {
		id = newCallID()
	}
	return callComplete, argsOff + n, []ToolCall{{ID: id, Name: name, Arguments: argText}}
}
