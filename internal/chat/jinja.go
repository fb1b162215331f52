package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"strings"
	"time"

	"github.com/ctxd/ctxd/third_party/jinja"
)

// newJinja compiles info.ChatTemplate and returns its renderer. The
// template sees the variables Hugging Face's apply_chat_template passes:
// messages, tools, add_generation_prompt, bos_token, eos_token, plus the
// raise_exception and strftime_now functions (the latter on info.Now).
func newJinja(info ModelInfo) (renderFunc, error) {
	if len(info.ChatTemplate) > MaxTemplateBytes {
		return nil, fmt.Errorf("%w: the template is %d bytes, the most is %d (MaxTemplateBytes)", ErrLimit, len(info.ChatTemplate), MaxTemplateBytes)
	}
	tmpl, err := jinja.Compile(info.ChatTemplate)
	if err != nil {
		return nil, err
	}
	// Mistral's templates refuse tool call IDs that are not 9 alphanumeric
	// characters; agents send longer ones (call_...), so those get a
	// derived 9-character ID, the same every time.
	shortIDs := strings.Contains(info.ChatTemplate, "length 9")
	now := info.Now
	if now == nil {
		now = time.Now
	}
	strftime := jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		format := "%Y-%m-%d"
		if len(args) > 0 && args[0].IsString() {
			format = args[0].AsString()
		}
		return jinja.NewString(strftime(now(), format)), nil
	})
	return func(ctx context.Context, msgs []Message, tools []Tool, gen bool) (string, error) {
		ms, err := messageValues(msgs, shortIDs)
		if err != nil {
			return "", err
		}
		ts, err := toolValues(tools)
		if err != nil {
			return "", err
		}
		ctx, cancel := context.WithTimeoutCause(ctx, RenderTimeout, fmt.Errorf("%w: rendering took over %v (RenderTimeout)", ErrLimit, RenderTimeout))
		defer cancel()
		out, err := tmpl.RenderContext(ctx, map[string]jinja.Value{
			"messages":              ms,
			"tools":                 ts,
			"add_generation_prompt": jinja.NewBool(gen),
			"bos_token":             jinja.NewString(info.BOS),
			"eos_token":             jinja.NewString(info.EOS),
			"strftime_now":          strftime,
		}, renderLimits)
		if err != nil {
			return "", boxed(ctx, err)
		}
		return out, nil
	}, nil
}

// messageValues converts msgs to the message dicts templates read: role,
// content, reasoning_content (when non-empty), tool_calls ({id, type,
// function: {name, arguments}}, arguments as a JSON object), tool_call_id
// and name (when non-empty).
func messageValues(msgs []Message, shortIDs bool) (jinja.Value, error) {
	id := func(s string) string {
		if shortIDs {
			return shortID(s)
		}
		return s
	}
	items := make([]jinja.Value, 0, len(msgs))
	for i, m := range msgs {
		d := jinja.NewDict()
		md := d.AsDict()
		md.Set("role", jinja.NewString(m.Role))
		md.Set("content", jinja.NewString(m.Content))
		if m.Reasoning != "" {
			md.Set("reasoning_content", jinja.NewString(m.Reasoning))
		}
		if len(m.ToolCalls) > 0 {
			calls := make([]jinja.Value, 0, len(m.ToolCalls))
			for _, c := range m.ToolCalls {
				args, err := jsonValue([]byte(orEmptyObject(c.Arguments)))
				if err != nil {
					return jinja.Value{}, fmt.Errorf("%w: message %d: tool call %q: arguments: %w", ErrMessages, i, c.Name, err)
				}
				fn := jinja.NewDict()
				fn.AsDict().Set("name", jinja.NewString(c.Name))
				fn.AsDict().Set("arguments", args)
				call := jinja.NewDict()
				call.AsDict().Set("id", jinja.NewString(id(c.ID)))
				call.AsDict().Set("type", jinja.NewString("function"))
				call.AsDict().Set("function", fn)
				calls = append(calls, call)
			}
			md.Set("tool_calls", jinja.NewList(calls))
		}
		if m.ToolCallID != "" {
			md.Set("tool_call_id", jinja.NewString(id(m.ToolCallID)))
		}
		if m.Name != "" {
			md.Set("name", jinja.NewString(m.Name))
		}
		items = append(items, d)
	}
	return jinja.NewList(items), nil
}

// toolValues converts tools to OpenAI function tool dicts, or none when
// there are no tools (as apply_chat_template passes tools=None).
func toolValues(tools []Tool) (jinja.Value, error) {
	if len(tools) == 0 {
		return jinja.None(), nil
	}
	items := make([]jinja.Value, 0, len(tools))
	for _, t := range tools {
		params := t.Parameters
		if len(params) == 0 {
			params = json.RawMessage(`{}`)
		}
		p, err := jsonValue(params)
		if err != nil {
			return jinja.Value{}, fmt.Errorf("%w: tool %q: parameters: %w", ErrMessages, t.Name, err)
		}
		fn := jinja.NewDict()
		fn.AsDict().Set("name", jinja.NewString(t.Name))
		fn.AsDict().Set("description", jinja.NewString(t.Description))
		fn.AsDict().Set("parameters", p)
		tool := jinja.NewDict()
		tool.AsDict().Set("type", jinja.NewString("function"))
		tool.AsDict().Set("function", fn)
		items = append(items, tool)
	}
	return jinja.NewList(items), nil
}

// jsonValue decodes one JSON value into a jinja value, keeping the order of
// object keys (tojson then writes them as the client sent them).
func jsonValue(data []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Value{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Value{}, fmt.Errorf("data after the JSON value")
	}
	return v, nil
}

// decodeValue reads the next JSON value from dec.
func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				key, _ := k.(string)
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(key, v)
			}
			_, err := dec.Token() // '}'
			return d, err
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			_, err := dec.Token() // ']'
			return jinja.NewList(items), err
		}
		return jinja.Value{}, fmt.Errorf("unexpected %v", x)
	default:
		return jinja.FromGoValue(tok), nil
	}
}

// shortID returns id when it is 9 ASCII letters or digits, else 9 such
// characters derived from a hash of id.
func shortID(id string) string {
	const alnum = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	ok := len(id) == 9
	for i := 0; ok && i < len(id); i++ {
		ok = strings.IndexByte(alnum, id[i]) >= 0
	}
	if ok {
		return id
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	v := h.Sum64()
	b := make([]byte, 9)
	for i := range b {
		b[i] = alnum[v%uint64(len(alnum))]
		v /= uint64(len(alnum))
	}
	return string(b)
}
