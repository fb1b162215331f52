package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/ctxd/ctxd/sidecar"
)

// streamResponse runs a streamed Responses call and returns the completed
// response and the event types seen.
func streamResponse(t *testing.T, client openai.Client, params responses.ResponseNewParams, opts ...option.RequestOption) (responses.Response, map[string]int) {
	t.Helper()
	stream := client.Responses.NewStreaming(context.Background(), params, opts...)
	types := map[string]int{}
	var done responses.Response
	var seq int64 = -1
	for stream.Next() {
		ev := stream.Current()
		types[ev.Type]++
		if ev.SequenceNumber <= seq {
			t.Errorf("sequence_number %d after %d", ev.SequenceNumber, seq)
		}
		seq = ev.SequenceNumber
		if ev.Type == "response.completed" {
			done = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	return done, types
}

// TestResponsesPlainAndStream: the official SDK's Responses calls, plain
// and streamed (the same greedy text, the whole event sequence), usage
// with cached_tokens, store:false, prompt_cache_key choosing the session.
func TestResponsesPlainAndStream(t *testing.T) {
	d := startDoor(t, sidecar.Config{HotTokens: sidecar.HotAuto}, Config{})
	ctx := context.Background()
	params := responses.ResponseNewParams{Model: "gpt-5-codex", Instructions: openai.String("You tell short stories to children. " + longText(1200)),
		Input:           responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("Tell me about Lily and the ball.", responses.EasyInputMessageRoleUser)}},
		MaxOutputTokens: openai.Int(12), Store: openai.Bool(false), PromptCacheKey: openai.String("thread-1")}
	var hresp *http.Response
	plain, err := d.openai.Responses.New(ctx, params, option.WithResponseInto(&hresp))
	if err != nil {
		t.Fatal(err)
	}
	if plain.OutputText() == "" || plain.Model != "stories260K" {
		t.Fatalf("plain: text %q model %q output %+v", plain.OutputText(), plain.Model, plain.Output)
	}
	u := plain.Usage
	if u.InputTokens < 1200 || u.InputTokensDetails.CachedTokens != 0 || u.OutputTokens < 1 || u.OutputTokens > 12 || u.TotalTokens != u.InputTokens+u.OutputTokens {
		t.Errorf("first usage %+v", u)
	}
	session := hresp.Header.Get("X-Ctxd-Session")

	done, types := streamResponse(t, d.openai, params, option.WithResponseInto(&hresp))
	for _, typ := range []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"} {
		if types[typ] == 0 {
			t.Errorf("no %s event (got %v)", typ, types)
		}
	}
	if done.OutputText() != plain.OutputText() {
		t.Errorf("streamed text %q, plain %q", done.OutputText(), plain.OutputText())
	}
	su := done.Usage
	if su.InputTokens != u.InputTokens || float64(su.InputTokensDetails.CachedTokens) < 0.9*float64(u.InputTokens) {
		t.Errorf("streamed usage %+v: want ≥ 90%% of %d cached", su, u.InputTokens)
	}
	if got := hresp.Header.Get("X-Ctxd-Session"); got != session {
		t.Errorf("prompt_cache_key went to session %s, then %s", session, got)
	}

	// The next turn sends the reply back (with the ids the server gave),
	// and reuses the whole previous prompt.
	params.Input.OfInputItemList = append(params.Input.OfInputItemList,
		responses.ResponseInputItemParamOfOutputMessage([]responses.ResponseOutputMessageContentUnionParam{{OfOutputText: &responses.ResponseOutputTextParam{Text: plain.OutputText()}}}, plain.Output[0].ID, responses.ResponseOutputMessageStatusCompleted),
		responses.ResponseInputItemParamOfMessage("And then?", responses.EasyInputMessageRoleUser))
	next, err := d.openai.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if c := next.Usage.InputTokensDetails.CachedTokens; float64(c) < 0.9*float64(u.InputTokens) {
		t.Errorf("second turn cached %d of the previous %d prompt tokens", c, u.InputTokens)
	}
}

// TestResponsesErrors: errors in OpenAI's shape; previous_response_id is
// refused with the reason; images are refused; any tool type is accepted.
func TestResponsesErrors(t *testing.T) {
	_, client := startScripted(t, &scripted{pieces: []string{"ok"}}, Config{})
	ctx := context.Background()
	in := responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}
	var apiErr *openai.Error
	_, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "m", Input: in, PreviousResponseID: openai.String("resp_1")})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "previous_response_id") {
		t.Errorf("previous_response_id: %v", err)
	}
	img := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage(responses.ResponseInputMessageContentListParam{
		{OfInputImage: &responses.ResponseInputImageParam{ImageURL: openai.String("data:image/png;base64,AAAA")}}}, responses.EasyInputMessageRoleUser)}
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{Model: "m", Input: responses.ResponseNewParamsInputUnion{OfInputItemList: img}})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "text only") {
		t.Errorf("image: %v", err)
	}
	_, err = client.Responses.Get(ctx, "resp_1", responses.ResponseGetParams{})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Errorf("GET a response: %v", err)
	}
	tools := []responses.ToolUnionParam{responses.ToolParamOfWebSearch(responses.WebSearchToolTypeWebSearch), responses.ToolParamOfCustom("apply_patch"),
		{OfLocalShell: &responses.ToolLocalShellParam{}}, responses.ToolParamOfFunction("f", map[string]any{"type": "object"}, false)}
	r, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "m", Input: in, Tools: tools})
	if err != nil || r.OutputText() != "ok" {
		t.Errorf("tools of every type: %v", err)
	}
}

// TestResponsesFunctionCalls: generated calls come back as function_call
// and custom_tool_call items (plain, and streamed with their argument
// events); their outputs go back and the next turn runs.
func TestResponsesFunctionCalls(t *testing.T) {
	script := []string{"Let me look.", "\n<tool", "_call>\n{\"name\": \"read_file\", ", "\"arguments\": {\"path\": \"main.py\"}}\n</tool_call>",
		"<tool_call>\n{\"name\": \"apply_patch\", \"arguments\": {\"input\": \"*** Begin Patch\"}}\n</tool_call>", "<|im_end|>"}
	_, client := startScripted(t, &scripted{pieces: script}, Config{})
	ctx := context.Background()
	params := responses.ResponseNewParams{Model: "m", Instructions: openai.String("You are a coding agent."),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Read main.py")},
		Tools: []responses.ToolUnionParam{responses.ToolParamOfFunction("read_file", map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}, false),
			responses.ToolParamOfCustom("apply_patch")}}
	check := func(how string, r responses.Response) (responses.ResponseOutputItemUnion, responses.ResponseOutputItemUnion) {
		t.Helper()
		if len(r.Output) != 3 || r.Output[0].Type != "message" || r.Output[1].Type != "function_call" || r.Output[2].Type != "custom_tool_call" {
			t.Fatalf("%s: output %+v", how, r.Output)
		}
		fc, cc := r.Output[1], r.Output[2]
		if fc.Name != "read_file" || !strings.Contains(fc.Arguments.OfString, `"main.py"`) || fc.CallID == "" {
			t.Errorf("%s: function_call %+v", how, fc)
		}
		if cc.Name != "apply_patch" || cc.Input != "*** Begin Patch" || cc.CallID == "" {
			t.Errorf("%s: custom_tool_call %+v", how, cc)
		}
		return fc, cc
	}
	plain, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	fc, cc := check("plain", *plain)
	done, types := streamResponse(t, client, params)
	check("streamed", done)
	for _, typ := range []string{"response.function_call_arguments.delta", "response.function_call_arguments.done", "response.custom_tool_call_input.done"} {
		if types[typ] == 0 {
			t.Errorf("no %s event (got %v)", typ, types)
		}
	}
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("Read main.py", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfFunctionCall(fc.Arguments.OfString, fc.CallID, fc.Name),
		{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{CallID: openai.String(fc.CallID), Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("print('hi')")}}},
		{OfCustomToolCall: &responses.ResponseCustomToolCallParam{CallID: cc.CallID, Name: cc.Name, Input: cc.Input}},
		{OfCustomToolCallOutput: &responses.ResponseCustomToolCallOutputParam{CallID: cc.CallID, Output: responses.ResponseCustomToolCallOutputOutputUnionParam{OfString: openai.String("Done!")}}},
	}}
	if _, err := client.Responses.New(ctx, params); err != nil {
		t.Fatalf("the outputs' turn: %v", err)
	}
}
