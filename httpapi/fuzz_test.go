package httpapi

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxd/ctxd/internal/chat"
)

// The request decoders of the OpenAI and Ollama APIs, fuzzed: any body
// decodes, validates and renders (through a real Jinja template, ChatML)
// into a turn or a typed error, without a crash (make fuzz; CI runs each
// for FUZZTIME). No daemon is involved: the model is described up front.

func fuzzServer(f *testing.F) *Server {
	f.Helper()
	s := New(noBackend{}, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	src, err := os.ReadFile(filepath.Join("..", "internal", "chat", "testdata", "chatml.jinja"))
	if err != nil {
		f.Fatal(err)
	}
	tm, err := chat.NewTemplate(chat.ModelInfo{ChatTemplate: string(src), EOS: "<|im_end|>"})
	if err != nil {
		f.Fatal(err)
	}
	s.models.cur = &modelInfo{id: "m", path: "/m.gguf", tmpl: tm, sessionTokens: 4096, trainedContext: 4096}
	return s
}

func fuzzRequest(path string, body []byte) *http.Request {
	return httptest.NewRequest("POST", path, bytes.NewReader(body))
}

var chatSeeds = []string{
	`{"model":"m","messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Read main.py"}],"tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}],"tool_choice":"auto","stream":true,"stream_options":{"include_usage":true},"max_tokens":64,"temperature":0.2,"stop":["\n\n"]}`,
	`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"text","text":" there"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a\"}"}}]},{"role":"tool","tool_call_id":"call_1","content":"x"}]}`,
	`{"messages":[{"role":"user","content":"hi"}],"n":2}`,
	`{"messages":[{"role":"robot","content":"hi"}]}`,
	`{"messages":[]}`, `[]`, `{"messages":[{"role":"user","content":"\u0000\ud800"}]}`,
}

func FuzzOpenAIChatRequest(f *testing.F) {
	s := fuzzServer(f)
	for _, b := range chatSeeds {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req oaiChatRequest
		r := fuzzRequest("/v1/chat/completions", body)
		if err := s.decodeBody(r, &req); err != nil {
			toAPIError(err)
			return
		}
		turn, err := s.prepareOpenAIChat(context.Background(), r.Header, &req)
		if err != nil {
			if ae := toAPIError(err); ae.status < 400 {
				t.Fatalf("error with status %d: %v", ae.status, err)
			}
			return
		}
		if turn == nil || len(turn.manifest.Segments) == 0 {
			t.Fatal("no turn and no error")
		}
	})
}

func FuzzOpenAICompletionRequest(f *testing.F) {
	s := fuzzServer(f)
	for _, b := range []string{`{"model":"m","prompt":"Once upon a time","max_tokens":8,"stop":"\n"}`, `{"prompt":["a"]}`, `{"prompt":["a","b"]}`, `{"prompt":""}`, `{"prompt":"x","suffix":"y"}`} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req oaiCompletionRequest
		r := fuzzRequest("/v1/completions", body)
		if err := s.decodeBody(r, &req); err != nil {
			return
		}
		if turn, err := s.prepareCompletion(context.Background(), r.Header, &req); err == nil && (turn == nil || len(turn.manifest.Segments) == 0) {
			t.Fatal("no turn and no error")
		}
	})
}

func FuzzOllamaChatRequest(f *testing.F) {
	s := fuzzServer(f)
	for _, b := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false,"options":{"num_predict":8,"temperature":0.1,"stop":["x"]}}`,
		`{"messages":[{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},{"role":"tool","content":"r","tool_name":"f"}],"tools":[{"type":"function","function":{"name":"f"}}]}`,
		`{"messages":[{"role":"user","content":"hi","images":["aGk="]}]}`, `{"messages":[{"role":"user"}],"format":"json"}`,
	} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req ollamaChatRequest
		r := fuzzRequest("/api/chat", body)
		if err := s.decodeBody(r, &req); err != nil {
			return
		}
		if turn, err := s.prepareOllamaChat(context.Background(), r.Header, &req); err == nil && (turn == nil || len(turn.manifest.Segments) == 0) {
			t.Fatal("no turn and no error")
		}
	})
}

// FuzzOllamaGenerateRequest drives the whole handler: its preparation is
// inline; the daemon (noBackend) answers every call with NO_MODEL.
func FuzzOllamaGenerateRequest(f *testing.F) {
	s := fuzzServer(f)
	for _, b := range []string{`{"model":"m","prompt":"Once","system":"be brief","stream":false}`, `{"prompt":"<s>raw","raw":true}`, `{"prompt":""}`, `{"prompt":"x","images":["aGk="]}`, `{"prompt":"x","options":{"num_predict":-1,"seed":3}}`} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		s.ollamaGenerate(w, fuzzRequest("/api/generate", body))
		if w.Code < 200 || w.Code > 599 {
			t.Fatalf("status %d", w.Code)
		}
	})
}
