package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/ctxd/ctxd/engine"
)

// thinker is a scripted daemon serving a reasoning model: its facts carry
// Qwen3's chat template, which writes <think> markers.
type thinker struct {
	*scripted
	tmpl string
}

func (f *thinker) ModelFacts() (engine.Facts, bool) {
	return engine.Facts{Path: f.model, Architecture: "qwen3", ChatTemplate: f.tmpl, EOSText: "<|im_end|>"}, true
}

func startThinker(t *testing.T, pieces []string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "internal", "chat", "testdata", "qwen3.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	f := &thinker{scripted: &scripted{model: "/models/qwen3.gguf", pieces: pieces}, tmpl: string(src)}
	return serveBackend(t, f, Config{})
}

// A reasoning model's <think> text reaches every API apart from the reply:
// Anthropic thinking blocks, Responses reasoning items, OpenAI-compatible
// reasoning_content, Ollama's thinking; streamed and not.
func TestReasoningApartFromTheReply(t *testing.T) {
	script := []string{"<think>", "\nThe user", " greets me.\n", "</think>", "\n\n", "Hello", " there.", "<|im_end|>"}
	const thought, reply = "The user greets me.", "Hello there."
	base := startThinker(t, script)
	ctx := context.Background()

	t.Run("anthropic", func(t *testing.T) {
		client := anthropicClient(base)
		params := anthropic.MessageNewParams{Model: "m", MaxTokens: 64, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
		plain, err := client.Messages.New(ctx, params)
		if err != nil {
			t.Fatal(err)
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
		for name, m := range map[string]*anthropic.Message{"plain": plain, "streamed": &acc} {
			if len(m.Content) != 2 || m.Content[0].Type != "thinking" || strings.TrimSpace(m.Content[0].Thinking) != thought ||
				m.Content[1].Type != "text" || m.Content[1].Text != reply {
				t.Errorf("%s: %+v", name, m.Content)
			}
		}
		// The thinking block goes back with the next turn.
		params.Messages = append(params.Messages, plain.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock("and?")))
		if _, err := client.Messages.New(ctx, params); err != nil {
			t.Errorf("a turn sending the thinking block back: %v", err)
		}
	})

	t.Run("responses", func(t *testing.T) {
		client := openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey("x"), option.WithMaxRetries(0))
		params := responses.ResponseNewParams{Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
		plain, err := client.Responses.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		stream := client.Responses.NewStreaming(ctx, params)
		var done *responses.Response
		var deltas strings.Builder
		for stream.Next() {
			ev := stream.Current()
			switch ev.Type {
			case "response.reasoning_text.delta":
				deltas.WriteString(ev.Delta)
			case "response.completed":
				r := ev.Response
				done = &r
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if done == nil || strings.TrimSpace(deltas.String()) != thought {
			t.Fatalf("streamed: reasoning deltas %q, completed %v", deltas.String(), done != nil)
		}
		for name, r := range map[string]*responses.Response{"plain": plain, "streamed": done} {
			if len(r.Output) != 2 || r.Output[0].Type != "reasoning" || r.Output[1].Type != "message" || r.OutputText() != reply {
				t.Errorf("%s: output %s", name, r.RawJSON())
				continue
			}
			if c := r.Output[0].Content; len(c) != 1 || strings.TrimSpace(c[0].Text) != thought {
				t.Errorf("%s: reasoning %+v", name, c)
			}
		}
	})

	post := func(t *testing.T, path, body string) map[string]any {
		t.Helper()
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %v", path, resp.StatusCode, err)
		}
		return v
	}
	t.Run("openai chat", func(t *testing.T) {
		v := post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
		msg := v["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
		if msg["content"] != reply || strings.TrimSpace(msg["reasoning_content"].(string)) != thought {
			t.Errorf("message %v", msg)
		}
	})
	t.Run("ollama", func(t *testing.T) {
		v := post(t, "/api/chat", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false}`)
		msg := v["message"].(map[string]any)
		if msg["content"] != reply || strings.TrimSpace(msg["thinking"].(string)) != thought {
			t.Errorf("message %v", msg)
		}
	})
}
