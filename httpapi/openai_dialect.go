package httpapi

import (
	"net/http"
	"time"

	"github.com/ctxd/ctxd/internal/chat"
)

// openaiDialect answers in OpenAI's shape: object "chat.completion" or
// "text_completion", streamed (SSE chunks, then [DONE]) or not.
type openaiDialect struct {
	id           string
	object       string
	created      int64
	chat         bool
	model        string
	includeUsage bool
	nCalls       int
}

func newOpenAIDialect(t *chatTurn, includeUsage bool) *openaiDialect {
	d := &openaiDialect{id: newID("cmpl-"), object: "text_completion", created: time.Now().Unix(), chat: t.chat, model: t.model.id, includeUsage: includeUsage}
	if t.chat {
		d.id, d.object = newID("chatcmpl-"), "chat.completion"
	}
	return d
}

func (d *openaiDialect) writeError(w http.ResponseWriter, err error) { writeError(w, false, err) }
func (d *openaiDialect) format() streamFormat                        { return streamFormat{sse: true} }

func (d *openaiDialect) chunk(delta oaiDelta, finish *string) any {
	if !d.chat {
		c := map[string]any{"index": 0, "text": "", "finish_reason": finish, "logprobs": nil}
		if delta.Content != nil {
			c["text"] = *delta.Content
		}
		return map[string]any{"id": d.id, "object": d.object, "created": d.created, "model": d.model, "choices": []any{c}}
	}
	return oaiChunk{ID: d.id, Object: d.object + ".chunk", Created: d.created, Model: d.model, Choices: []oaiChunkChoice{{Delta: delta, FinishReason: finish}}}
}

func (d *openaiDialect) opening(*turnOut) []wireEvent {
	return []wireEvent{{data: d.chunk(oaiDelta{Role: "assistant", Content: strp("")}, nil)}}
}

func (d *openaiDialect) keepAlive() wireEvent {
	return wireEvent{data: d.chunk(oaiDelta{Content: strp("")}, nil)}
}

func (d *openaiDialect) reasoning(text string) []wireEvent {
	return []wireEvent{{data: d.chunk(oaiDelta{ReasoningContent: strp(text)}, nil)}}
}

func (d *openaiDialect) delta(text string, calls []chat.ToolCall) []wireEvent {
	var evs []wireEvent
	if text != "" {
		evs = append(evs, wireEvent{data: d.chunk(oaiDelta{Content: strp(text)}, nil)})
	}
	if len(calls) > 0 {
		evs = append(evs, wireEvent{data: d.chunk(oaiDelta{ToolCalls: toolCallsWire(calls, d.nCalls)}, nil)})
		d.nCalls += len(calls)
	}
	return evs
}

func (d *openaiDialect) extra(o *turnOut) *ctxdExtra {
	res, _ := o.result()
	extra := &ctxdExtra{Session: o.session, SessionChoice: o.how, ResumedSnapshot: res.resumed}
	if res.clamped {
		extra.MaxTokensAsked, extra.MaxTokensGiven = res.requestedMax, res.grantedMax
	}
	return extra
}

func (d *openaiDialect) closing(o *turnOut) []wireEvent {
	res, _ := o.result()
	usage, timings := usageOf(res)
	finish := finishReason(res.reason, d.nCalls > 0)
	last := d.chunk(oaiDelta{}, &finish)
	if c, ok := last.(oaiChunk); ok {
		c.Timings, c.Ctxd = timings, d.extra(o)
		last = c
	}
	evs := []wireEvent{{data: last}}
	if d.includeUsage {
		evs = append(evs, wireEvent{data: oaiChunk{ID: d.id, Object: d.object + ".chunk", Created: d.created, Model: d.model, Choices: []oaiChunkChoice{}, Usage: usage, Timings: timings}})
	}
	return append(evs, wireEvent{raw: []byte("[DONE]")})
}

func (d *openaiDialect) failure(err error) []wireEvent {
	ae := toAPIError(err)
	return []wireEvent{{data: map[string]any{"error": map[string]any{"message": ae.message, "type": ae.typ, "code": ae.code}}}, {raw: []byte("[DONE]")}}
}

func (d *openaiDialect) body(o *turnOut) any {
	res, _ := o.result()
	usage, timings := usageOf(res)
	finish := finishReason(res.reason, len(o.calls) > 0)
	out := map[string]any{"id": d.id, "object": d.object, "created": d.created, "model": d.model,
		"usage": usage, "timings": timings, "ctxd": d.extra(o), "system_fingerprint": "ctxd"}
	if d.chat {
		msg := map[string]any{"role": "assistant", "content": o.text}
		if o.reasoning != "" {
			msg["reasoning_content"] = o.reasoning
		}
		if len(o.calls) > 0 {
			msg["tool_calls"] = toolCallsWire(o.calls, 0)
			if o.text == "" {
				msg["content"] = nil
			}
		}
		out["choices"] = []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}}
	} else {
		out["choices"] = []any{map[string]any{"index": 0, "text": o.text, "finish_reason": finish, "logprobs": nil}}
	}
	return out
}
