package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"

	"github.com/ctxd/ctxd/sidecar"
)

func anthropicClient(base string, opts ...aoption.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]aoption.RequestOption{aoption.WithBaseURL(base + "/"), aoption.WithAPIKey("x"), aoption.WithMaxRetries(0)}, opts...)...)
}

// claudeSystem is a system prompt as Claude Code sends it: the billing
// header line (its checksum differs per session), then the prompt.
func claudeSystem(checksum, prompt string) []anthropic.TextBlockParam {
	return []anthropic.TextBlockParam{
		{Text: "x-anthropic-billing-header: cc_version=2.0.14." + checksum + "; cc_entrypoint=sdk-cli;"},
		{Text: "You are Claude Code, Anthropic's official CLI for Claude."},
		{Text: prompt},
	}
}

// TestAnthropicMessagesPlainAndStream: the official SDK gets text plain
// and streamed (the same greedy text), usage in Anthropic's meaning
// (input_tokens prefilled, cache_read_input_tokens reused), the prefix
// reused across sessions whose billing headers differ, and count_tokens
// equal to the prompt a turn holds.
func TestAnthropicMessagesPlainAndStream(t *testing.T) {
	d := startDoor(t, sidecar.Config{HotTokens: sidecar.HotAuto}, Config{})
	client := anthropicClient(d.base)
	ctx := context.Background()
	prompt := "You tell short stories to children. " + longText(1200)
	params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 12, System: claudeSystem("a1f", prompt),
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Tell me about Lily and the ball."))},
		Metadata: anthropic.MetadataParam{UserID: anthropic.String(`{"device_id":"d1","session_id":"11111111-2222"}`)}}

	var hresp *http.Response
	plain, err := client.Messages.New(ctx, params, aoption.WithResponseInto(&hresp))
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.Content) != 1 || plain.Content[0].Type != "text" || plain.Content[0].Text == "" {
		t.Fatalf("content %+v", plain.Content)
	}
	if plain.StopReason != anthropic.StopReasonMaxTokens && plain.StopReason != anthropic.StopReasonEndTurn {
		t.Errorf("stop_reason %q", plain.StopReason)
	}
	if plain.Model != "stories260K" {
		t.Errorf("model %q: the served model is reported", plain.Model)
	}
	u := plain.Usage
	prompt1 := u.InputTokens + u.CacheReadInputTokens
	if u.InputTokens < 1200 || u.CacheReadInputTokens != 0 || u.OutputTokens < 1 || u.OutputTokens > 12 {
		t.Errorf("first usage %+v", u)
	}
	session := hresp.Header.Get("X-Ctxd-Session")

	count, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: params.Model,
		System:   anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: params.System},
		Messages: params.Messages})
	if err != nil {
		t.Fatal(err)
	}
	if count.InputTokens != prompt1 {
		t.Errorf("count_tokens %d, the turn's prompt %d", count.InputTokens, prompt1)
	}

	// Streamed, as a new Claude Code process would send it: another
	// billing checksum; the prompt's KV is reused all the same.
	params.System = claudeSystem("9c2", prompt)
	stream := client.Messages.NewStreaming(ctx, params, aoption.WithResponseInto(&hresp))
	var acc anthropic.Message
	types := map[string]int{}
	for stream.Next() {
		ev := stream.Current()
		types[ev.Type]++
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"} {
		if types[typ] == 0 {
			t.Errorf("no %s event (got %v)", typ, types)
		}
	}
	if len(acc.Content) != 1 || acc.Content[0].Text != plain.Content[0].Text {
		t.Errorf("streamed content %+v, plain %q", acc.Content, plain.Content[0].Text)
	}
	su := acc.Usage
	if su.InputTokens+su.CacheReadInputTokens != prompt1 || float64(su.CacheReadInputTokens) < 0.9*float64(prompt1) {
		t.Errorf("streamed usage %+v: want ≥ 90%% of %d prompt tokens read from cache", su, prompt1)
	}
	if acc.StopReason != plain.StopReason || su.OutputTokens != u.OutputTokens {
		t.Errorf("streamed stop %q / %d tokens, plain %q / %d", acc.StopReason, su.OutputTokens, plain.StopReason, u.OutputTokens)
	}
	if got := hresp.Header.Get("X-Ctxd-Session"); got != session {
		t.Errorf("metadata.user_id's session went to session %s, then %s", session, got)
	}
}

// TestAnthropicErrors: errors come in Anthropic's shape with its types;
// x-api-key is accepted like Authorization.
func TestAnthropicErrors(t *testing.T) {
	base, _ := startScripted(t, &scripted{pieces: []string{"ok"}}, Config{APIKey: "secret-key"})
	ctx := context.Background()
	msg := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}

	noKey := anthropicClient(base)
	_, err := noKey.Messages.New(ctx, anthropic.MessageNewParams{Model: "m", MaxTokens: 4, Messages: msg})
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusUnauthorized || !strings.Contains(ae.RawJSON(), `"authentication_error"`) {
		t.Fatalf("wrong key: %v", err)
	}
	client := anthropicClient(base, aoption.WithAPIKey("secret-key"))
	r, err := client.Messages.New(ctx, anthropic.MessageNewParams{Model: "any-model-name", MaxTokens: 4, Messages: msg})
	if err != nil || r.Content[0].Text != "ok" {
		t.Fatalf("x-api-key: %v %+v", err, r)
	}
	img := anthropic.NewUserMessage(anthropic.NewImageBlockBase64("image/png", "iVBORw0KGgo="))
	_, err = client.Messages.New(ctx, anthropic.MessageNewParams{Model: "m", MaxTokens: 4, Messages: []anthropic.MessageParam{img}})
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || !strings.Contains(ae.RawJSON(), `"invalid_request_error"`) ||
		!strings.Contains(ae.RawJSON(), "text only") {
		t.Fatalf("image: %v", err)
	}
	_, err = client.Messages.New(ctx, anthropic.MessageNewParams{Model: "m", MaxTokens: 4})
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || !strings.Contains(ae.RawJSON(), "messages") {
		t.Fatalf("no messages: %v", err)
	}
}

var readFileAnthropic = anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: "read_file", Description: anthropic.String("Read a file"),
	InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"path": map[string]any{"type": "string"}}}}}

// TestAnthropicToolUse: a generated call comes back as a tool_use block
// (plain, and streamed as input_json_delta), stop_reason tool_use; the
// result goes back as a tool_result and the next turn runs.
func TestAnthropicToolUse(t *testing.T) {
	script := []string{"Let me look.", "\n<tool", "_call>\n{\"name\": \"read_file\", ", "\"arguments\": {\"path\": \"main.py\"}}\n</tool_call>", "<|im_", "end|>"}
	base, _ := startScripted(t, &scripted{pieces: script}, Config{})
	client := anthropicClient(base)
	ctx := context.Background()
	params := anthropic.MessageNewParams{Model: "m", MaxTokens: 64, System: []anthropic.TextBlockParam{{Text: "You are a coding agent."}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Read main.py"))},
		Tools:    []anthropic.ToolUnionParam{readFileAnthropic}}
	plain, err := client.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if plain.StopReason != anthropic.StopReasonToolUse || len(plain.Content) != 2 || plain.Content[0].Text != "Let me look.\n" && plain.Content[0].Text != "Let me look." {
		t.Fatalf("plain: %s %+v", plain.StopReason, plain.Content)
	}
	tu := plain.Content[1]
	if tu.Type != "tool_use" || tu.Name != "read_file" || !strings.Contains(string(tu.Input), `"main.py"`) || tu.ID == "" {
		t.Fatalf("tool_use %+v", tu)
	}

	stream := client.Messages.NewStreaming(ctx, params)
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.StopReason != anthropic.StopReasonToolUse || len(acc.Content) != 2 || acc.Content[1].Name != "read_file" ||
		!strings.Contains(string(acc.Content[1].Input), `"main.py"`) || strings.Contains(acc.Content[0].Text, "tool_call") {
		t.Fatalf("streamed: %s %+v", acc.StopReason, acc.Content)
	}

	params.Messages = append(params.Messages, plain.ToParam(),
		anthropic.NewUserMessage(anthropic.NewToolResultBlock(tu.ID, "print('hi')", false), anthropic.NewTextBlock("and now?")))
	if _, err := client.Messages.New(ctx, params); err != nil {
		t.Fatalf("the tool_result turn: %v", err)
	}
}
