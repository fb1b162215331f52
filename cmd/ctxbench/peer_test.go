package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeOpenAI is an OpenAI-compatible server that streams tokens at a fixed
// pace and records the bodies it was sent.
type fakeOpenAI struct {
	perToken time.Duration
	usage    bool
	mu       sync.Mutex
	bodies   []map[string]any
	paths    []string
}

func (f *fakeOpenAI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"fake-model","object":"model"}]}`)
	})
	serve := func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.bodies = append(f.bodies, body)
		f.paths = append(f.paths, r.URL.Path)
		f.mu.Unlock()
		if body["stream"] != true {
			http.Error(w, "want stream", http.StatusBadRequest)
			return
		}
		n := int(body["max_tokens"].(float64))
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := range n {
			time.Sleep(f.perToken)
			if r.URL.Path == "/v1/completions" {
				fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"t%d \"}]}\n\n", i)
			} else {
				fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d \"}}]}\n\n", i)
			}
			fl.Flush()
		}
		if f.usage {
			fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}}\n\n", len(fmt.Sprint(body["messages"], body["prompt"]))/5, n)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
	mux.HandleFunc("POST /v1/chat/completions", serve)
	mux.HandleFunc("POST /v1/completions", serve)
	return mux
}

// bench peer against two fake servers, one five times as slow per token:
// both get the same growing conversation, the times are at least the
// servers' sleeps and the ratios are ctxd / peer.
func TestBenchPeerAgainstFakeServers(t *testing.T) {
	peer := &fakeOpenAI{perToken: 2 * time.Millisecond, usage: true}
	slow := &fakeOpenAI{perToken: 10 * time.Millisecond} // no usage: tokens counted from the stream
	ps, ss := httptest.NewServer(peer.handler()), httptest.NewServer(slow.handler())
	defer ps.Close()
	defer ss.Close()
	code, out, errs := ctl(t, "--no-progress", "bench", "peer", "--url", ps.URL, "--ctxd-url", ss.URL,
		"--turns", "3", "--first-words", "200", "--turn-words", "30", "--max-tokens", "8", "--nonce", "n1", "--json")
	if code != 0 {
		t.Fatalf("bench peer: %d %s", code, errs)
	}
	var res struct {
		Model string    `json:"peer_model"`
		Turns []peerRow `json:"turns"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.Model != "fake-model" || len(res.Turns) != 3 {
		t.Fatalf("model %q, %d turns: %s", res.Model, len(res.Turns), out)
	}
	for _, r := range res.Turns {
		if r.Peer.CompletionTokens != 8 || r.Ctxd.CompletionTokens != 8 {
			t.Errorf("turn %d: %d and %d tokens, want 8", r.Turn, r.Peer.CompletionTokens, r.Ctxd.CompletionTokens)
		}
		// Sleeps bound the times from below however busy the machine is.
		if r.Ctxd.TotalMS < 80 || r.Ctxd.DecodeMSPerToken < 10 || r.Peer.TotalMS < 16 || r.Peer.DecodeMSPerToken < 2 {
			t.Errorf("turn %d: ctxd side %.1f ms (%.1f per token), peer %.1f ms (%.1f per token): below the servers' sleeps",
				r.Turn, r.Ctxd.TotalMS, r.Ctxd.DecodeMSPerToken, r.Peer.TotalMS, r.Peer.DecodeMSPerToken)
		}
		if math.Abs(r.TotalRatio-r.Ctxd.TotalMS/r.Peer.TotalMS) > 1e-9 || math.Abs(r.DecodeRatio-r.Ctxd.DecodeMSPerToken/r.Peer.DecodeMSPerToken) > 1e-9 ||
			math.Abs(r.TTFTRatio-r.Ctxd.TTFTMS/r.Peer.TTFTMS) > 1e-9 {
			t.Errorf("turn %d: ratios %+v are not ctxd / peer", r.Turn, r)
		}
		if r.Peer.PromptTokens == 0 {
			t.Errorf("turn %d: the peer's usage was not read", r.Turn)
		}
	}
	// The same requests, in order, each carrying the whole history with
	// the fixed replies.
	if len(peer.bodies) != 3 || len(slow.bodies) != 3 {
		t.Fatalf("%d and %d requests", len(peer.bodies), len(slow.bodies))
	}
	for i := range 3 {
		a, b := peer.bodies[i], slow.bodies[i]
		if !reflect.DeepEqual(a["messages"], b["messages"]) || a["temperature"] != float64(0) {
			t.Errorf("turn %d: the servers were sent different conversations or sampling", i+1)
		}
		msgs := a["messages"].([]any)
		if len(msgs) != 2+2*i {
			t.Errorf("turn %d: %d messages, want %d", i+1, len(msgs), 2+2*i)
		}
		first := msgs[1].(map[string]any)["content"].(string)
		if !strings.HasPrefix(first, "n1 ") || len(strings.Fields(first)) < 200 {
			t.Errorf("turn %d: the first message does not open with the nonce or is short: %.40q", i+1, first)
		}
		if i > 0 && msgs[2].(map[string]any)["content"] != assistantReply(0) {
			t.Errorf("turn %d: the history's reply is %v", i+1, msgs[2])
		}
	}
	if peer.bodies[0]["model"] != "fake-model" {
		t.Errorf("model sent: %v", peer.bodies[0]["model"])
	}
}

func TestBenchPeerCompletionsAndErrors(t *testing.T) {
	f := &fakeOpenAI{usage: true}
	s := httptest.NewServer(f.handler())
	defer s.Close()
	code, out, errs := ctl(t, "--no-progress", "bench", "peer", "--url", s.URL, "--ctxd-url", s.URL, "--api", "completions",
		"--turns", "2", "--first-words", "20", "--turn-words", "5", "--max-tokens", "3")
	if code != 0 || !strings.Contains(out, "ratios are ctxd / peer") {
		t.Fatalf("completions: %d %s %s", code, out, errs)
	}
	if f.paths[0] != "/v1/completions" || !strings.Contains(f.bodies[2]["prompt"].(string), "Assistant: "+assistantReply(0)) {
		t.Errorf("completions requests: %v %v", f.paths, f.bodies[2]["prompt"])
	}
	if code, _, _ := ctl(t, "bench", "peer"); code != 2 {
		t.Errorf("without --url: exit %d, want 2", code)
	}
	if code, _, _ := ctl(t, "bench", "peer", "--url", s.URL, "--api", "embeddings"); code != 2 {
		t.Errorf("bad --api: exit %d, want 2", code)
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	if code, _, errs := ctl(t, "--no-progress", "bench", "peer", "--url", s.URL, "--ctxd-url", down.URL); code == 0 || !strings.Contains(errs, "ctxd") {
		t.Errorf("unreachable ctxd: exit %d %s", code, errs)
	}
}
