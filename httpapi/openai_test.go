package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar"
)

// TestOpenAIChatPlainAndStreaming: the official SDK gets the same greedy
// text streamed and not, usage with cached tokens, llama-server timings.
func TestOpenAIChatPlainAndStreaming(t *testing.T) {
	d := startDoor(t, sidecar.Config{HotTokens: sidecar.HotAuto}, Config{})
	ctx := context.Background()
	// Prompts of a few thousand tokens, like an agent's: a hot-set session
	// may recompute up to one block (64 tokens) where a tape is cut.
	conv := &conversation{system: "You tell short stories to children. " + longText(1200)}
	params := conv.params("Tell me about Lily and the ball.", 12)

	var hresp *http.Response
	plain, err := d.openai.Chat.Completions.New(ctx, params, option.WithResponseInto(&hresp))
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.Choices) != 1 || plain.Choices[0].Message.Content == "" {
		t.Fatalf("no text: %+v", plain.Choices)
	}
	if plain.Choices[0].FinishReason != "length" && plain.Choices[0].FinishReason != "stop" {
		t.Errorf("finish_reason %q", plain.Choices[0].FinishReason)
	}
	u := plain.Usage
	if u.PromptTokens < 1200 || u.CompletionTokens < 1 || u.CompletionTokens > 12 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("usage %+v", u)
	}
	if u.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("first request reused %d tokens of a fresh daemon", u.PromptTokensDetails.CachedTokens)
	}
	timings, ok := plain.JSON.ExtraFields["timings"]
	if !ok || !strings.Contains(timings.Raw(), `"prompt_n":`) || !strings.Contains(timings.Raw(), `"cache_n":0`) {
		t.Errorf("timings missing or wrong: %v", timings.Raw())
	}
	if hresp.Header.Get("X-Ctxd-Session") == "" {
		t.Error("no X-Ctxd-Session header")
	}

	// The same body streamed: identical greedy text, nearly all cached.
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := d.openai.Chat.Completions.NewStreaming(ctx, params)
	acc := openai.ChatCompletionAccumulator{}
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := acc.Choices[0].Message.Content, plain.Choices[0].Message.Content; got != want {
		t.Errorf("streamed text %q, plain %q", got, want)
	}
	if chunks < 3 {
		t.Errorf("only %d chunks", chunks)
	}
	su := acc.Usage
	if su.PromptTokens != u.PromptTokens || su.CompletionTokens != u.CompletionTokens {
		t.Errorf("streamed usage %+v, plain %+v", su, u)
	}
	if c := su.PromptTokensDetails.CachedTokens; float64(c) < 0.9*float64(u.PromptTokens) {
		t.Errorf("identical retried body: cached_tokens %d of %d prompt tokens", c, u.PromptTokens)
	}
}

// TestOpenAICachedTokensAcrossTurns: each turn extends the previous one;
// from the 2nd on, cached_tokens ≥ 0.9 × the previous prompt's tokens.
func TestOpenAICachedTokensAcrossTurns(t *testing.T) {
	d := startDoor(t, sidecar.Config{HotTokens: sidecar.HotAuto}, Config{})
	ctx := context.Background()
	conv := &conversation{system: "You are a coding agent. " + longText(300)}
	prev := int64(0)
	for turn, user := range []string{"List the files.", "Read main.py. " + longText(40), "Now fix the bug."} {
		resp, err := d.openai.Chat.Completions.New(ctx, conv.params(user, 8))
		if err != nil {
			t.Fatal(err)
		}
		u := resp.Usage
		t.Logf("turn %d: prompt %d cached %d", turn+1, u.PromptTokens, u.PromptTokensDetails.CachedTokens)
		if turn > 0 && float64(u.PromptTokensDetails.CachedTokens) < 0.9*float64(prev) {
			t.Errorf("turn %d: cached_tokens %d < 0.9 × previous prompt %d", turn+1, u.PromptTokensDetails.CachedTokens, prev)
		}
		prev = u.PromptTokens
		conv.reply(resp.Choices[0].Message.Content)
	}
}

// TestOpenAIErrors: malformed JSON, an unknown model, an over-long prompt
// on a dense-only daemon, a bad field; each in OpenAI's error shape.
func TestOpenAIErrors(t *testing.T) {
	d := startDoor(t, sidecar.Config{ContextTokens: 256, NoCold: true}, Config{})
	ctx := context.Background()

	code, _, body := d.post("/v1/chat/completions", `{"model": "stories260K", "messages": [`)
	e := decodeJSON(t, body)["error"].(map[string]any)
	if code != 400 || e["type"] != "invalid_request_error" || !strings.Contains(e["message"].(string), "malformed JSON") {
		t.Errorf("bad JSON: %d %s", code, body)
	}
	code, _, body = d.post("/v1/chat/completions", `{"messages": [{"role": "user", "content": 7}]}`)
	if code != 400 || !strings.Contains(string(body), "content") {
		t.Errorf("bad content: %d %s", code, body)
	}

	// Any model name is served by the loaded model, which the answer names.
	var apiErr *openai.Error
	other, err := d.openai.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-nonexistent", MaxTokens: openai.Int(2),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	if err != nil || other.Model != "stories260K" {
		t.Errorf("another model name: %v %+v", err, other)
	}

	conv := &conversation{system: longText(400)}
	_, err = d.openai.Chat.Completions.New(ctx, conv.params("hello", 8))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "context_length_exceeded" ||
		!strings.Contains(apiErr.Message, "256 tokens") {
		t.Fatalf("over-long prompt on a dense daemon: %v", err)
	}
	// Streamed, the refusal is still a plain HTTP 400.
	stream := d.openai.Chat.Completions.NewStreaming(ctx, conv.params("hello", 8))
	for stream.Next() {
	}
	if !errors.As(stream.Err(), &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "context_length_exceeded" {
		t.Errorf("streamed over-long prompt: %v", stream.Err())
	}

	// max_tokens beyond what fits is clamped, not refused, and reported.
	short := &conversation{system: "Stories."}
	var hresp *http.Response
	resp, err := d.openai.Chat.Completions.New(ctx, short.params("Once upon a time", 100000), option.WithResponseInto(&hresp))
	if err != nil {
		t.Fatal(err)
	}
	clamp := hresp.Header.Get(clampHeader)
	if !strings.Contains(clamp, "requested=100000") || resp.Usage.PromptTokens+resp.Usage.CompletionTokens > 256 {
		t.Errorf("clamp header %q, usage %+v", clamp, resp.Usage)
	}
}

// TestOpenAICompletions: /v1/completions plain and streamed, and /v1/models.
func TestOpenAICompletions(t *testing.T) {
	d := startDoor(t, sidecar.Config{HotTokens: sidecar.HotAuto}, Config{})
	ctx := context.Background()
	params := openai.CompletionNewParams{Model: "stories260K", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(8)}
	c, err := d.openai.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if c.Choices[0].Text == "" || c.Usage.CompletionTokens == 0 {
		t.Fatalf("completion %+v", c)
	}
	s := d.openai.Completions.NewStreaming(ctx, params)
	var text strings.Builder
	for s.Next() {
		if ch := s.Current(); len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Text)
		}
	}
	if s.Err() != nil || text.String() != c.Choices[0].Text {
		t.Errorf("streamed %q (%v), plain %q", text.String(), s.Err(), c.Choices[0].Text)
	}
	models, err := d.openai.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(models.Data) != 1 || models.Data[0].ID != "stories260K" || !strings.Contains(models.Data[0].RawJSON(), `"context_length"`) {
		t.Errorf("models %+v", models.Data)
	}
}

// TestOpenAICancellation: a client that goes away mid-stream stops the
// decode at once and leaves the session usable.
func TestOpenAICancellation(t *testing.T) {
	d := startDoor(t, sidecar.Config{HotTokens: sidecar.HotAuto, NoCold: true}, Config{})
	conv := &conversation{system: "Stories."}
	params := conv.params("Once upon a time", 200000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := d.openai.Chat.Completions.NewStreaming(ctx, params, option.WithHeader("X-Session-Id", "cancel-me"))
	got := 0
	for stream.Next() {
		if got++; got == 5 {
			cancel()
			break
		}
	}
	stream.Close()
	d.idle() // the decode ended (it would run for minutes otherwise)
	sess := d.srv.table.snapshot()
	if len(sess) != 1 {
		t.Fatalf("%d sessions", len(sess))
	}
	resp := d.p.Server.Handle(context.Background(), 0, &pb.Request{Body: &pb.Request_Explain{Explain: &pb.ExplainRequest{SessionId: sess[0].id}}}, nil)
	if resp.GetError() != nil {
		t.Fatal(resp.GetError())
	}
	gen := resp.GetExplain().GetGeneratedTokens()
	t.Logf("tokens generated before the decode stopped: %d", gen)
	if gen > 5000 {
		t.Errorf("decode went on after the client left: %d tokens", gen)
	}
	// The session takes the next request.
	start := time.Now()
	r, err := d.openai.Chat.Completions.New(context.Background(), conv.params("Again", 4), option.WithHeader("X-Session-Id", "cancel-me"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Errorf("after a cancelled stream nothing was reused (%v)", time.Since(start))
	}
}

// TestMaxTokensHeader: X-Ctxd-Max-Tokens caps a reply below what the body
// asks (or when it asks nothing), on any API; a bad value is a 400.
func TestMaxTokensHeader(t *testing.T) {
	d := startDoor(t, sidecar.Config{ContextTokens: 512, NoCold: true}, Config{})
	code, _, b := d.post("/v1/responses", `{"model":"gpt-5-codex","input":"Once upon a time"}`, "X-Ctxd-Max-Tokens", "3")
	var r struct {
		Status string `json:"status"`
		Usage  struct {
			OutputTokens int `json:"output_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &r); err != nil || code != 200 || r.Usage.OutputTokens != 3 || r.Status != "incomplete" {
		t.Errorf("Responses capped at 3: %d %s", code, b)
	}
	code, _, b = d.post("/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":50}`, "X-Ctxd-Max-Tokens", "2")
	if m := decodeJSON(t, b); code != 200 || m["usage"].(map[string]any)["completion_tokens"] != float64(2) {
		t.Errorf("chat capped at 2: %d %s", code, b)
	}
	code, _, b = d.post("/v1/messages", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":50}`, "X-Ctxd-Max-Tokens", "zero")
	if code != 400 || !strings.Contains(string(b), "X-Ctxd-Max-Tokens") || !strings.Contains(string(b), `"type":"error"`) {
		t.Errorf("a bad header: %d %s", code, b)
	}
}
