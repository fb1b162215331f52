package httpapi

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/ctxd/ctxd/internal/chat"
)

// ollamaDialect answers in Ollama's shape: /api/chat (message) or
// /api/generate (response), NDJSON events or one object.
type ollamaDialect struct {
	chat  bool
	model string
}

func (d *ollamaDialect) writeError(w http.ResponseWriter, err error) { writeError(w, true, err) }
func (d *ollamaDialect) format() streamFormat                        { return streamFormat{} }

func (d *ollamaDialect) event(text string, calls []chat.ToolCall, done bool) map[string]any {
	ev := map[string]any{"model": d.model, "created_at": time.Now().UTC().Format(time.RFC3339Nano), "done": done}
	if d.chat {
		msg := map[string]any{"role": "assistant", "content": text}
		if len(calls) > 0 {
			wire := make([]any, len(calls))
			for i, c := range calls {
				wire[i] = map[string]any{"function": map[string]any{"name": c.Name, "arguments": json.RawMessage(validObject(c.Arguments))}}
			}
			msg["tool_calls"] = wire
		}
		ev["message"] = msg
	} else {
		ev["response"] = text
	}
	return ev
}

func (d *ollamaDialect) opening(*turnOut) []wireEvent {
	return []wireEvent{{data: d.event("", nil, false)}}
}

func (d *ollamaDialect) keepAlive() wireEvent { return wireEvent{data: d.event("", nil, false)} }

// withThinking adds a reasoning model's thinking where Ollama puts it.
func (d *ollamaDialect) withThinking(ev map[string]any, thinking string) map[string]any {
	if thinking == "" {
		return ev
	}
	if msg, ok := ev["message"].(map[string]any); ok {
		msg["thinking"] = thinking
	} else {
		ev["thinking"] = thinking
	}
	return ev
}

func (d *ollamaDialect) reasoning(text string) []wireEvent {
	return []wireEvent{{data: d.withThinking(d.event("", nil, false), text)}}
}

func (d *ollamaDialect) delta(text string, calls []chat.ToolCall) []wireEvent {
	return []wireEvent{{data: d.event(text, calls, false)}}
}

// final adds the turn's counts to the last event.
func (d *ollamaDialect) final(ev map[string]any, o *turnOut) map[string]any {
	res, _ := o.result()
	for k, v := range ollamaCounts(res) {
		ev[k] = v
	}
	ev["done_reason"] = finishReason(res.reason, false)
	ev["total_duration"] = time.Since(o.start).Nanoseconds()
	extra := &ctxdExtra{Session: o.session, SessionChoice: o.how, ResumedSnapshot: res.resumed}
	if res.clamped {
		extra.MaxTokensAsked, extra.MaxTokensGiven = res.requestedMax, res.grantedMax
	}
	ev["ctxd"] = extra
	return ev
}

func (d *ollamaDialect) closing(o *turnOut) []wireEvent {
	return []wireEvent{{data: d.final(d.event("", nil, true), o)}}
}

func (d *ollamaDialect) failure(err error) []wireEvent {
	return []wireEvent{{data: map[string]any{"error": toAPIError(err).message}}}
}

func (d *ollamaDialect) body(o *turnOut) any {
	return d.final(d.withThinking(d.event(o.text, o.calls, true), o.reasoning), o)
}
