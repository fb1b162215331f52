package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"

	"github.com/ctxd/ctxd/internal/chat"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// anthropicDialect answers in Anthropic's Messages shape: a message
// object, or the SSE sequence message_start, content_block_start / delta
// / stop per text or tool_use block, message_delta (stop reason, usage),
// message_stop; ping while a prompt is prefilled.
type anthropicDialect struct {
	id    string
	model string
	stops []string // the request's stop_sequences

	blocks    int  // content blocks started
	openText  bool // a text block is open (index blocks-1)
	openThink bool // a thinking block is open (index blocks-1)
	nCalls    int  // tool_use blocks
}

func newAnthropicDialect(t *chatTurn, stops []string) *anthropicDialect {
	return &anthropicDialect{id: newID("msg_"), model: t.model.id, stops: stops}
}

func (d *anthropicDialect) writeError(w http.ResponseWriter, err error) { writeAnthropicError(w, err) }
func (d *anthropicDialect) format() streamFormat                        { return streamFormat{sse: true} }

func (d *anthropicDialect) message(o *turnOut, content []any, final bool) map[string]any {
	res, known := o.result()
	var usage anthropicUsage
	if known {
		usage = anthropicUsageOf(res)
	}
	msg := map[string]any{"id": d.id, "type": "message", "role": "assistant", "model": d.model,
		"content": content, "stop_reason": nil, "stop_sequence": nil, "usage": usage}
	if final {
		reason, seq := d.stopReason(res, len(o.calls) > 0)
		msg["stop_reason"], msg["stop_sequence"] = reason, seq
	}
	return msg
}

// stopReason is Anthropic's name for why the turn ended, and the stop
// sequence that ended it (null otherwise).
func (d *anthropicDialect) stopReason(res turnResult, calls bool) (string, any) {
	switch {
	case calls:
		return "tool_use", nil
	case res.reason == pb.StopReason_STOP_REASON_MAX_TOKENS || res.reason == pb.StopReason_STOP_REASON_CONTEXT_FULL:
		return "max_tokens", nil
	case res.reason == pb.StopReason_STOP_REASON_STOP_STRING && slices.Contains(d.stops, res.stopString):
		return "stop_sequence", res.stopString
	}
	return "end_turn", nil
}

func (d *anthropicDialect) opening(o *turnOut) []wireEvent {
	return []wireEvent{{name: "message_start", data: map[string]any{"type": "message_start", "message": d.message(o, []any{}, false)}}}
}

func (d *anthropicDialect) keepAlive() wireEvent {
	return wireEvent{name: "ping", data: map[string]any{"type": "ping"}}
}

func (d *anthropicDialect) closeText() []wireEvent {
	if !d.openText {
		return nil
	}
	d.openText = false
	return []wireEvent{{name: "content_block_stop", data: map[string]any{"type": "content_block_stop", "index": d.blocks - 1}}}
}

// closeThink ends an open thinking block. ctxd signs nothing: the
// signature is empty (clients that send thinking back to ctxd are read as
// they are).
func (d *anthropicDialect) closeThink() []wireEvent {
	if !d.openThink {
		return nil
	}
	d.openThink = false
	i := d.blocks - 1
	return []wireEvent{
		{name: "content_block_delta", data: map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "signature_delta", "signature": ""}}},
		{name: "content_block_stop", data: map[string]any{"type": "content_block_stop", "index": i}},
	}
}

func (d *anthropicDialect) reasoning(text string) []wireEvent {
	evs := d.closeText()
	if !d.openThink {
		evs = append(evs, wireEvent{name: "content_block_start", data: map[string]any{"type": "content_block_start", "index": d.blocks,
			"content_block": map[string]any{"type": "thinking", "thinking": "", "signature": ""}}})
		d.blocks++
		d.openThink = true
	}
	return append(evs, wireEvent{name: "content_block_delta", data: map[string]any{"type": "content_block_delta", "index": d.blocks - 1,
		"delta": map[string]any{"type": "thinking_delta", "thinking": text}}})
}

func (d *anthropicDialect) delta(text string, calls []chat.ToolCall) []wireEvent {
	var evs []wireEvent
	if text != "" || len(calls) > 0 {
		evs = d.closeThink()
	}
	if text != "" {
		if !d.openText {
			evs = append(evs, wireEvent{name: "content_block_start", data: map[string]any{"type": "content_block_start", "index": d.blocks,
				"content_block": map[string]any{"type": "text", "text": ""}}})
			d.blocks++
			d.openText = true
		}
		evs = append(evs, wireEvent{name: "content_block_delta", data: map[string]any{"type": "content_block_delta", "index": d.blocks - 1,
			"delta": map[string]any{"type": "text_delta", "text": text}}})
	}
	if len(calls) > 0 {
		evs = append(evs, d.closeText()...)
	}
	for _, c := range calls {
		i := d.blocks
		d.blocks++
		d.nCalls++
		evs = append(evs,
			wireEvent{name: "content_block_start", data: map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": antToolID(c), "name": c.Name, "input": map[string]any{}}}},
			wireEvent{name: "content_block_delta", data: map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": objectText(c.Arguments)}}},
			wireEvent{name: "content_block_stop", data: map[string]any{"type": "content_block_stop", "index": i}})
	}
	return evs
}

func (d *anthropicDialect) closing(o *turnOut) []wireEvent {
	evs := append(d.closeThink(), d.closeText()...)
	res, _ := o.result()
	reason, seq := d.stopReason(res, d.nCalls > 0)
	evs = append(evs,
		wireEvent{name: "message_delta", data: map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": reason, "stop_sequence": seq}, "usage": anthropicUsageOf(res)}},
		wireEvent{name: "message_stop", data: map[string]any{"type": "message_stop"}})
	return evs
}

func (d *anthropicDialect) failure(err error) []wireEvent {
	return []wireEvent{{name: "error", data: anthropicErrorBody(toAPIError(err))}}
}

func (d *anthropicDialect) body(o *turnOut) any {
	content := []any{}
	if o.reasoning != "" {
		content = append(content, map[string]any{"type": "thinking", "thinking": o.reasoning, "signature": ""})
	}
	if o.text != "" {
		content = append(content, map[string]any{"type": "text", "text": o.text})
	}
	for _, c := range o.calls {
		content = append(content, map[string]any{"type": "tool_use", "id": antToolID(c), "name": c.Name, "input": json.RawMessage(objectText(c.Arguments))})
	}
	return d.message(o, content, true)
}

// antToolID is a tool call's id in Anthropic's style.
func antToolID(c chat.ToolCall) string {
	if c.ID != "" {
		return c.ID
	}
	return newID("toolu_")
}

// objectText is a tool call's arguments as a JSON object's text: the
// arguments when they are one, else {}.
func objectText(args string) string {
	var v map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &v) != nil || v == nil {
		return "{}"
	}
	return args
}

// anthropicErrorType is Anthropic's error type for an HTTP status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	return "api_error"
}

func anthropicErrorBody(ae *apiError) map[string]any {
	status := ae.status
	if status == 499 {
		status = http.StatusServiceUnavailable
	}
	return map[string]any{"type": "error", "error": map[string]any{"type": anthropicErrorType(status), "message": ae.message}}
}

// writeAnthropicError answers err as Anthropic does:
// {"type":"error","error":{"type":…,"message":…}}.
func writeAnthropicError(w http.ResponseWriter, err error) {
	ae := toAPIError(err)
	status := ae.status
	if status == 499 {
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(anthropicErrorBody(ae))
}
