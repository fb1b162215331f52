package httpapi

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/ctxd/ctxd/internal/chat"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// responsesDialect answers in the Responses API's shape: a response
// object, or the SSE events response.created, response.in_progress (also
// the keep-alive while a prompt is prefilled), output_item.added / done
// around each message (content_part.added / done, output_text.delta /
// done) and each call (function_call_arguments.delta / done,
// custom_tool_call_input.delta / done), then response.completed with
// usage, or response.failed.
type responsesDialect struct {
	id           string
	model        string
	created      int64
	kinds        map[string]string // tool name -> kind
	instructions string
	maxOutput    *int
	temperature  *float64
	topP         *float64

	output     []any  // finished output items
	msgID      string // the open message item ("" = none)
	msgText    string
	reasonID   string // the open reasoning item ("" = none)
	reasonText string
}

func newResponsesDialect(t *chatTurn, kinds map[string]string, req *respRequest) *responsesDialect {
	return &responsesDialect{id: newID("resp_"), model: t.model.id, created: time.Now().Unix(), kinds: kinds,
		instructions: req.Instructions, maxOutput: req.MaxOutputTokens, temperature: req.Temperature, topP: req.TopP}
}

func (d *responsesDialect) writeError(w http.ResponseWriter, err error) { writeError(w, false, err) }
func (d *responsesDialect) format() streamFormat                        { return streamFormat{sse: true, numbered: true} }

// response is the response object with status and output.
func (d *responsesDialect) response(status string, output []any, o *turnOut) map[string]any {
	r := map[string]any{"id": d.id, "object": "response", "created_at": d.created, "status": status, "model": d.model,
		"output": output, "error": nil, "incomplete_details": nil, "instructions": nilIfEmpty(d.instructions),
		"max_output_tokens": d.maxOutput, "temperature": d.temperature, "top_p": d.topP,
		"parallel_tool_calls": true, "tool_choice": "auto", "tools": []any{}, "store": false,
		"previous_response_id": nil, "text": map[string]any{"format": map[string]any{"type": "text"}}, "metadata": map[string]any{},
		"usage": nil}
	if o != nil {
		res, _ := o.result()
		r["usage"] = responsesUsageOf(res)
		extra := &ctxdExtra{Session: o.session, SessionChoice: o.how, ResumedSnapshot: res.resumed}
		if res.clamped {
			extra.MaxTokensAsked, extra.MaxTokensGiven = res.requestedMax, res.grantedMax
		}
		r["ctxd"] = extra
		if res.reason == pb.StopReason_STOP_REASON_MAX_TOKENS || res.reason == pb.StopReason_STOP_REASON_CONTEXT_FULL {
			r["status"] = "incomplete"
			r["incomplete_details"] = map[string]any{"reason": "max_output_tokens"}
		}
	}
	return r
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (d *responsesDialect) ev(typ string, fields map[string]any) wireEvent {
	fields["type"] = typ
	return wireEvent{name: typ, data: fields}
}

func (d *responsesDialect) opening(*turnOut) []wireEvent {
	return []wireEvent{
		d.ev("response.created", map[string]any{"response": d.response("in_progress", []any{}, nil)}),
		d.ev("response.in_progress", map[string]any{"response": d.response("in_progress", []any{}, nil)}),
	}
}

func (d *responsesDialect) keepAlive() wireEvent {
	return d.ev("response.in_progress", map[string]any{"response": d.response("in_progress", []any{}, nil)})
}

func messageItem(id, text, status string) map[string]any {
	return map[string]any{"id": id, "type": "message", "status": status, "role": "assistant",
		"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}}}
}

func reasoningItem(id, text, status string) map[string]any {
	return map[string]any{"id": id, "type": "reasoning", "status": status, "summary": []any{},
		"content": []any{map[string]any{"type": "reasoning_text", "text": text}}}
}

// closeReasoning finishes the open reasoning item.
func (d *responsesDialect) closeReasoning() []wireEvent {
	if d.reasonID == "" {
		return nil
	}
	idx := len(d.output)
	item := reasoningItem(d.reasonID, d.reasonText, "completed")
	evs := []wireEvent{
		d.ev("response.reasoning_text.done", map[string]any{"item_id": d.reasonID, "output_index": idx, "content_index": 0, "text": d.reasonText}),
		d.ev("response.output_item.done", map[string]any{"output_index": idx, "item": item}),
	}
	d.output = append(d.output, item)
	d.reasonID, d.reasonText = "", ""
	return evs
}

func (d *responsesDialect) reasoning(text string) []wireEvent {
	evs := d.closeMessage()
	idx := len(d.output)
	if d.reasonID == "" {
		d.reasonID = newID("rs_")
		evs = append(evs, d.ev("response.output_item.added", map[string]any{"output_index": idx,
			"item": map[string]any{"id": d.reasonID, "type": "reasoning", "status": "in_progress", "summary": []any{}, "content": []any{}}}))
	}
	d.reasonText += text
	return append(evs, d.ev("response.reasoning_text.delta", map[string]any{"item_id": d.reasonID, "output_index": idx, "content_index": 0, "delta": text}))
}

// closeMessage finishes the open message item.
func (d *responsesDialect) closeMessage() []wireEvent {
	if d.msgID == "" {
		return nil
	}
	idx := len(d.output)
	part := map[string]any{"type": "output_text", "text": d.msgText, "annotations": []any{}, "logprobs": []any{}}
	item := messageItem(d.msgID, d.msgText, "completed")
	evs := []wireEvent{
		d.ev("response.output_text.done", map[string]any{"item_id": d.msgID, "output_index": idx, "content_index": 0, "text": d.msgText, "logprobs": []any{}}),
		d.ev("response.content_part.done", map[string]any{"item_id": d.msgID, "output_index": idx, "content_index": 0, "part": part}),
		d.ev("response.output_item.done", map[string]any{"output_index": idx, "item": item}),
	}
	d.output = append(d.output, item)
	d.msgID, d.msgText = "", ""
	return evs
}

// callItem is the output item of a tool call, by the tool's kind.
func (d *responsesDialect) callItem(c chat.ToolCall, status string, partial bool) map[string]any {
	callID := c.ID
	if callID == "" {
		callID = newID("call_")
	}
	switch d.kinds[c.Name] {
	case toolCustom:
		var args struct {
			Input string `json:"input"`
		}
		json.Unmarshal([]byte(c.Arguments), &args)
		input := args.Input
		if partial {
			input = ""
		}
		return map[string]any{"id": newID("ctc_"), "type": "custom_tool_call", "status": status, "call_id": callID, "name": c.Name, "input": input}
	case toolLocalShell:
		var args struct {
			Command   []string `json:"command"`
			Workdir   string   `json:"workdir"`
			TimeoutMS *int     `json:"timeout_ms"`
		}
		json.Unmarshal([]byte(c.Arguments), &args)
		action := map[string]any{"type": "exec", "command": append([]string{}, args.Command...), "env": map[string]string{}}
		if args.Workdir != "" {
			action["working_directory"] = args.Workdir
		}
		if args.TimeoutMS != nil {
			action["timeout_ms"] = *args.TimeoutMS
		}
		return map[string]any{"id": newID("lsh_"), "type": "local_shell_call", "status": status, "call_id": callID, "action": action}
	}
	args := objectText(c.Arguments)
	if partial {
		args = ""
	}
	return map[string]any{"id": newID("fc_"), "type": "function_call", "status": status, "call_id": callID, "name": c.Name, "arguments": args}
}

func (d *responsesDialect) delta(text string, calls []chat.ToolCall) []wireEvent {
	var evs []wireEvent
	if text != "" || len(calls) > 0 {
		evs = d.closeReasoning()
	}
	if text != "" {
		idx := len(d.output)
		if d.msgID == "" {
			d.msgID = newID("msg_")
			evs = append(evs,
				d.ev("response.output_item.added", map[string]any{"output_index": idx, "item": map[string]any{"id": d.msgID, "type": "message", "status": "in_progress", "role": "assistant", "content": []any{}}}),
				d.ev("response.content_part.added", map[string]any{"item_id": d.msgID, "output_index": idx, "content_index": 0,
					"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}, "logprobs": []any{}}}))
		}
		d.msgText += text
		evs = append(evs, d.ev("response.output_text.delta", map[string]any{"item_id": d.msgID, "output_index": idx, "content_index": 0, "delta": text, "logprobs": []any{}}))
	}
	if len(calls) > 0 {
		evs = append(evs, d.closeMessage()...)
	}
	for _, c := range calls {
		idx := len(d.output)
		done := d.callItem(c, "completed", false)
		added := map[string]any{}
		for k, v := range done {
			added[k] = v
		}
		added["status"] = "in_progress"
		id := done["id"]
		evs = append(evs, d.ev("response.output_item.added", map[string]any{"output_index": idx, "item": added}))
		switch done["type"] {
		case "function_call":
			added["arguments"] = ""
			evs = append(evs,
				d.ev("response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": idx, "delta": done["arguments"]}),
				d.ev("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": idx, "name": c.Name, "arguments": done["arguments"]}))
		case "custom_tool_call":
			added["input"] = ""
			evs = append(evs,
				d.ev("response.custom_tool_call_input.delta", map[string]any{"item_id": id, "output_index": idx, "delta": done["input"]}),
				d.ev("response.custom_tool_call_input.done", map[string]any{"item_id": id, "output_index": idx, "input": done["input"]}))
		}
		evs = append(evs, d.ev("response.output_item.done", map[string]any{"output_index": idx, "item": done}))
		d.output = append(d.output, done)
	}
	return evs
}

func (d *responsesDialect) closing(o *turnOut) []wireEvent {
	evs := append(d.closeReasoning(), d.closeMessage()...)
	return append(evs, d.ev("response.completed", map[string]any{"response": d.response("completed", d.output, o)}))
}

func (d *responsesDialect) failure(err error) []wireEvent {
	ae := toAPIError(err)
	r := d.response("failed", d.output, nil)
	code := ae.code
	if code == "" {
		code = "server_error"
	}
	r["error"] = map[string]any{"code": code, "message": ae.message}
	return []wireEvent{d.ev("response.failed", map[string]any{"response": r})}
}

func (d *responsesDialect) body(o *turnOut) any {
	var output []any
	if o.reasoning != "" {
		output = append(output, reasoningItem(newID("rs_"), o.reasoning, "completed"))
	}
	if o.text != "" {
		output = append(output, messageItem(newID("msg_"), o.text, "completed"))
	}
	for _, c := range o.calls {
		output = append(output, d.callItem(c, "completed", false))
	}
	if output == nil {
		output = []any{}
	}
	return d.response("completed", output, o)
}
