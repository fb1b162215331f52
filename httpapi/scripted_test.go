package httpapi

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/ctxd/ctxd/internal/testmodel"
)

// startScripted serves the door in front of a scripted daemon.
func startScripted(t *testing.T, f *scripted, hc Config) (string, openai.Client) {
	t.Helper()
	f.model = testmodel.Stories(t) // its GGUF has no chat template: the fallback (Hermes tool calls)
	base := serveBackend(t, f, hc)
	return base, openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey("x"), option.WithMaxRetries(0))
}

// serveBackend serves the door in front of b until the test ends and
// returns its base URL.
func serveBackend(t *testing.T, b Backend, hc Config) string {
	t.Helper()
	hc.Addr, hc.Logger = "127.0.0.1:0", testLogger(t)
	s := New(b, hc)
	ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + ln.Addr().String()
}

var readFileTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
	Name: "read_file", Description: openai.String("Read a file"),
	Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}},
})

// TestToolCallsStreamed: generated Hermes tool-call text comes back as
// tool_calls (streamed deltas and not), finish_reason tool_calls, text
// around it kept; the stop string never shows.
func TestToolCallsStreamed(t *testing.T) {
	script := []string{"Let me look.", "\n<tool", "_call>\n{\"name\": \"read_file\", ", "\"arguments\": {\"path\": \"main.py\"}}\n</tool_call>", "<|im_", "end|>"}
	_, client := startScripted(t, &scripted{pieces: script}, Config{})
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: "stories260K",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are a coding agent."), openai.UserMessage("Read main.py")},
		Tools:    []openai.ChatCompletionToolUnionParam{readFileTool}}

	plain, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	ch := plain.Choices[0]
	if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 {
		t.Fatalf("plain: finish %q, tool calls %+v, content %q", ch.FinishReason, ch.Message.ToolCalls, ch.Message.Content)
	}
	if tc := ch.Message.ToolCalls[0]; tc.Function.Name != "read_file" || !strings.Contains(tc.Function.Arguments, `"main.py"`) || tc.ID == "" {
		t.Errorf("plain tool call %+v", tc)
	}

	stream := client.Chat.Completions.NewStreaming(ctx, params)
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	m := acc.Choices[0].Message
	if acc.Choices[0].FinishReason != "tool_calls" || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "read_file" ||
		!strings.Contains(m.ToolCalls[0].Function.Arguments, `"main.py"`) {
		t.Fatalf("streamed: finish %q, tool calls %+v", acc.Choices[0].FinishReason, m.ToolCalls)
	}
	if !strings.Contains(m.Content, "Let me look.") || strings.Contains(m.Content, "tool_call") || strings.Contains(m.Content, "<|im_") {
		t.Errorf("streamed content %q", m.Content)
	}
}

// TestTextThatIsNotAToolCallStaysText: a broken call is returned as text.
func TestTextThatIsNotAToolCallStaysText(t *testing.T) {
	script := []string{"I will ", "<tool_call>{not json", " at all", "<|im_end|>"}
	_, client := startScripted(t, &scripted{pieces: script}, Config{})
	params := openai.ChatCompletionNewParams{Model: "stories260K",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("go")},
		Tools:    []openai.ChatCompletionToolUnionParam{readFileTool}}
	stream := client.Chat.Completions.NewStreaming(context.Background(), params)
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if stream.Err() != nil {
		t.Fatal(stream.Err())
	}
	if got := acc.Choices[0].Message.Content; got != "I will <tool_call>{not json at all" || len(acc.Choices[0].Message.ToolCalls) != 0 {
		t.Errorf("content %q, calls %+v", got, acc.Choices[0].Message.ToolCalls)
	}
}

// TestKeepAliveWhilePrefilling: headers go out at once and an empty-content
// delta at least every KeepAlive while a long prefill runs.
func TestKeepAliveWhilePrefilling(t *testing.T) {
	base, _ := startScripted(t, &scripted{pieces: []string{"Done."}, prefillDelay: 700 * time.Millisecond}, Config{KeepAlive: 100 * time.Millisecond})
	body := `{"model": "stories260K", "stream": true, "messages": [{"role": "user", "content": "hi"}]}`
	start := time.Now()
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("headers after %v (the prefill takes 700 ms)", d)
	}
	sc := bufio.NewScanner(resp.Body)
	var gaps []time.Duration
	last := time.Now()
	empty, content := 0, false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		gaps = append(gaps, time.Since(last))
		last = time.Now()
		switch {
		case strings.Contains(line, `"content":""`) && !content:
			empty++
		case strings.Contains(line, `"content":"Done."`):
			content = true
		}
	}
	if empty < 4 || !content {
		t.Errorf("%d empty-content chunks before the text (content seen: %v)", empty, content)
	}
	for _, g := range gaps {
		if g > 400*time.Millisecond {
			t.Errorf("a gap of %v between chunks (keep-alive 100 ms)", g)
		}
	}
}

// TestDisconnectCancelsPrefill: a client that leaves while the prompt is
// prefilled cancels the daemon call.
func TestDisconnectCancelsPrefill(t *testing.T) {
	f := &scripted{pieces: []string{"x"}, prefillDelay: time.Hour}
	base, _ := startScripted(t, f, Config{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"stream": true, "messages": [{"role": "user", "content": "hi"}]}`
	conn.Write([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body))
	time.Sleep(100 * time.Millisecond)
	conn.Close()
	// The Serve cleanup waits for the request: it must end now, not in an hour.
}

// TestClampReportedInStreamTrailer: a streamed response reports a clamped
// max_tokens in its trailer and in the final chunk.
func TestClampReportedInStreamTrailer(t *testing.T) {
	base, _ := startScripted(t, &scripted{pieces: []string{"Done."}}, Config{})
	body := `{"stream": true, "max_tokens": 200000, "messages": [{"role": "user", "content": "hi"}]}`
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	all, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The scripted session holds 100,000 tokens and the prompt 100.
	if got := resp.Trailer.Get(clampHeader); got != "requested=200000 granted=99900" {
		t.Errorf("trailer %s = %q", clampHeader, got)
	}
	if !strings.Contains(string(all), `"max_tokens_granted":99900`) {
		t.Errorf("final chunk does not report the clamp:\n%s", all)
	}
}
