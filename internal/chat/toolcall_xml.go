package chat

import (
	"bytes"
	"encoding/json"
	"strings"
)

// parseXML parses Qwen3-Coder's calls:
//
//	<tool_call>
//	<function=NAME>
//	<parameter=KEY>
//	VALUE
//	</parameter>
//	</function>
//	</tool_call>
//
// The <tool_call> wrapper may be missing. A value is a JSON value when the
// tool's schema says the parameter is not a string and it parses as one,
// else a string.
func (p *streamParser) parseXML(final bool) (callStatus, int, []ToolCall) {
	closer := xmlFunctionClose
	if strings.HasPrefix(p.buf, hermesOpen) {
		closer = hermesClose
	}
	end := strings.Index(p.buf, closer)
	if end < 0 {
		if final {
			return callInvalid, len(p.buf), nil
		}
		return callIncomplete, 0, nil
	}
	n := end + len(closer)
	body := p.buf[:end]
	if closer == hermesClose {
		body = strings.TrimSpace(body[len(hermesOpen):])
		if !strings.HasPrefix(body, xmlFunctionOpen) {
			// Qwen3-Coder sometimes writes Hermes JSON inside the tag.
			if c, ok := jsonCall([]byte(body)); ok {
				return callComplete, n, []ToolCall{c}
			}
			return callInvalid, n, nil
		}
	}
	c, ok := p.xmlFunction(body)
	if !ok {
		return callInvalid, n, nil
	}
	return callComplete, n, []ToolCall{c}
}

// xmlFunction decodes "<function=NAME>...params...[</function>]".
func (p *streamParser) xmlFunction(s string) (ToolCall, bool) {
	s = strings.TrimSuffix(strings.TrimSpace(s), xmlFunctionClose)
	if !strings.HasPrefix(s, xmlFunctionOpen) {
		return ToolCall{}, false
	}
	s = s[len(xmlFunctionOpen):]
	gt := strings.IndexByte(s, '>')
	if gt <= 0 {
		return ToolCall{}, false
	}
	name := strings.TrimSpace(s[:gt])
	if name == "" || strings.ContainsAny(name, "<\n") {
		return ToolCall{}, false
	}
	s = s[gt+1:]
	types := paramTypes(p.tools[name])
	var args bytes.Buffer
	args.WriteByte('{')
	for first := true; ; first = false {
		i := strings.Index(s, xmlParamOpen)
		if i < 0 {
			if strings.TrimSpace(s) != "" {
				return ToolCall{}, false
			}
			break
		}
		if strings.TrimSpace(s[:i]) != "" {
			return ToolCall{}, false
		}
		s = s[i+len(xmlParamOpen):]
		gt := strings.IndexByte(s, '>')
		if gt <= 0 {
			return ToolCall{}, false
		}
		key := strings.TrimSpace(s[:gt])
		s = s[gt+1:]
		// The value ends at </parameter>, or, when the model left that
		// out, at the next parameter.
		vend, next := strings.Index(s, xmlParamClose), 0
		if vend >= 0 {
			next = vend + len(xmlParamClose)
		}
		if j := strings.Index(s, xmlParamOpen); j >= 0 && (vend < 0 || j < vend) {
			vend, next = j, j
		}
		if vend < 0 {
			vend, next = len(s), len(s)
		}
		value := strings.TrimSuffix(strings.TrimPrefix(s[:vend], "\n"), "\n")
		s = s[next:]
		if !first {
			args.WriteByte(',')
		}
		k, _ := json.Marshal(key)
		args.Write(k)
		args.WriteByte(':')
		args.Write(xmlValue(value, types[key]))
	}
	args.WriteByte('}')
	return ToolCall{ID: newCallID(), Name: name, Arguments: args.String()}, true
}

// xmlValue encodes a parameter value: as is when the schema type is not
// "string" and value is JSON, else as a JSON string.
func xmlValue(value, typ string) []byte {
	if typ != "string" && typ != "" {
		v := strings.TrimSpace(value)
		var b bytes.Buffer
		if json.Valid([]byte(v)) && json.Compact(&b, []byte(v)) == nil {
			return b.Bytes()
		}
	}
	out, _ := json.Marshal(value)
	return out
}

// paramTypes maps a tool's parameter names to their JSON schema types.
func paramTypes(t Tool) map[string]string {
	var schema struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
	}
	if json.Unmarshal(t.Parameters, &schema) != nil {
		return nil
	}
	out := make(map[string]string, len(schema.Properties))
	for k, v := range schema.Properties {
		if s, ok := v.Type.(string); ok {
			out[k] = s
		} else if v.Type != nil {
			out[k] = "any"
		}
	}
	return out
}
