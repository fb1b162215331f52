package httpapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/sidecar"
)

// ndjson splits a streamed Ollama response into its objects.
func ndjson(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		out = append(out, decodeJSON(t, sc.Bytes()))
	}
	return out
}

// TestOllamaEndpoints: /api/chat and /api/generate streamed (NDJSON, the
// default) and not, honest eval counts, and the model endpoints.
func TestOllamaEndpoints(t *testing.T) {
	d := startDoor(t, sidecar.Config{HotTokens: sidecar.HotAuto, NoCold: true}, Config{})
	body := `{"model": "stories260K", "messages": [{"role": "system", "content": "` + longText(800) + `"}, {"role": "user", "content": "Once upon a time"}], "options": {"num_predict": 6}}`
	code, h, b := d.post("/api/chat", body)
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "application/x-ndjson") {
		t.Fatalf("/api/chat: %d %s %s", code, h.Get("Content-Type"), b)
	}
	evs := ndjson(t, b)
	last := evs[len(evs)-1]
	var text strings.Builder
	for _, ev := range evs {
		text.WriteString(ev["message"].(map[string]any)["content"].(string))
	}
	if last["done"] != true || last["done_reason"] != "length" || text.Len() == 0 {
		t.Fatalf("last event %v, text %q", last, text.String())
	}
	evaluated, cached := last["prompt_eval_count"].(float64), last["prompt_cache_count"].(float64)
	if evaluated < 800 || cached != 0 || last["eval_count"].(float64) != 6 {
		t.Errorf("first chat: prompt_eval_count %v prompt_cache_count %v eval_count %v", evaluated, cached, last["eval_count"])
	}
	// Not streamed, the same body: the prompt's KV is reused.
	code, _, b = d.post("/api/chat", strings.Replace(body, `"options"`, `"stream": false, "options"`, 1))
	one := decodeJSON(t, b)
	if code != 200 || one["done"] != true || one["message"].(map[string]any)["content"] != text.String() {
		t.Fatalf("non-streamed chat: %d %s (streamed text %q)", code, b, text.String())
	}
	if c := one["prompt_cache_count"].(float64); c < 0.9*evaluated || one["prompt_eval_count"].(float64) > 0.1*evaluated {
		t.Errorf("retried chat: prompt_cache_count %v, prompt_eval_count %v of %v", c, one["prompt_eval_count"], evaluated)
	}

	code, _, b = d.post("/api/generate", `{"model": "stories260K:latest", "prompt": "Once upon a time", "raw": true, "stream": false, "options": {"num_predict": 4}}`)
	g := decodeJSON(t, b)
	if code != 200 || g["response"] == "" || g["done"] != true {
		t.Errorf("/api/generate: %d %s", code, b)
	}
	code, _, b = d.post("/api/generate", `{"model": "stories260K", "prompt": "Lily", "options": {"num_predict": 3}}`)
	if evs := ndjson(t, b); code != 200 || len(evs) < 2 || evs[len(evs)-1]["done"] != true {
		t.Errorf("streamed /api/generate: %d %s", code, b)
	}

	code, b = d.get("/api/tags")
	if code != 200 || !strings.Contains(string(b), `"name":"stories260K"`) {
		t.Errorf("/api/tags: %d %s", code, b)
	}
	code, _, b = d.post("/api/show", `{"model": "stories260K"}`)
	var show struct {
		ModelInfo map[string]any `json:"model_info"`
	}
	json.Unmarshal(b, &show)
	if code != 200 || show.ModelInfo["llama.context_length"] == nil || show.ModelInfo["ctxd.session_tokens"] == nil {
		t.Errorf("/api/show: %d %s", code, b)
	}
	if code, b = d.get("/api/version"); code != 200 || !strings.Contains(string(b), `"version":"0.13.4"`) {
		t.Errorf("/api/version: %d %s (Codex --oss needs 0.13.4 or newer)", code, b)
	}
	if code, b = d.get("/api/ps"); code != 200 || !strings.Contains(string(b), `"context_length"`) {
		t.Errorf("/api/ps: %d %s", code, b)
	}
}

// TestContextLengthAgrees: /v1/models, /v1/models/{id}, /api/show (its
// num_ctx and ARCH.context_length) and /api/ps report one context length,
// a session's, for any model name.
func TestContextLengthAgrees(t *testing.T) {
	d := startDoor(t, sidecar.Config{HotTokens: sidecar.HotAuto, NoCold: true}, Config{})
	want := d.srv.table.srv.models
	mi, err := want.get(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	n := float64(mi.sessionTokens)
	if n <= 2048 {
		t.Fatalf("a hot-set session holds %v tokens: want more than the trained window", n)
	}
	var models struct {
		Data []struct {
			ID            string  `json:"id"`
			ContextLength float64 `json:"context_length"`
		} `json:"data"`
	}
	_, b := d.get("/v1/models")
	json.Unmarshal(b, &models)
	if len(models.Data) != 1 || models.Data[0].ContextLength != n {
		t.Errorf("/v1/models: %s", b)
	}
	_, b = d.get("/v1/models/claude-haiku-4-5")
	if m := decodeJSON(t, b); m["context_length"] != n || m["id"] != "stories260K" {
		t.Errorf("/v1/models/ANY: %s", b)
	}
	req, _ := http.NewRequest("GET", d.base+"/v1/models", nil)
	req.Header.Set("anthropic-version", "2023-06-01")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		var list struct {
			Data []struct {
				ID             string  `json:"id"`
				MaxInputTokens float64 `json:"max_input_tokens"`
			} `json:"data"`
		}
		json.Unmarshal(b, &list)
		if len(list.Data) != 1 || list.Data[0].MaxInputTokens != n {
			t.Errorf("Anthropic's /v1/models: %s", b)
		}
	}
	_, _, b = d.post("/api/show", `{"model": "gpt-oss:20b"}`)
	var show struct {
		Parameters string         `json:"parameters"`
		ModelInfo  map[string]any `json:"model_info"`
	}
	json.Unmarshal(b, &show)
	if show.ModelInfo["llama.context_length"] != n || show.Parameters != "num_ctx "+strconv.Itoa(int(n)) {
		t.Errorf("/api/show: %s", b)
	}
	var ps struct {
		Models []struct {
			ContextLength float64 `json:"context_length"`
		} `json:"models"`
	}
	_, b = d.get("/api/ps")
	json.Unmarshal(b, &ps)
	if len(ps.Models) != 1 || ps.Models[0].ContextLength != n {
		t.Errorf("/api/ps: %s", b)
	}
}

// TestOllamaErrors: Ollama's error shape {"error": "..."}.
func TestOllamaErrors(t *testing.T) {
	d := startDoor(t, sidecar.Config{ContextTokens: 256, NoCold: true}, Config{})
	for _, c := range []struct {
		path, body string
		code       int
		says       string
	}{
		{"/api/chat", `{"model": `, 400, "malformed JSON"},
		{"/api/chat", `{"model": "stories260K", "messages": [{"role": "user", "content": "` + longText(400) + `"}], "stream": false}`, 400, "maximum context length is 256 tokens"},
		{"/api/chat", `{"model": "stories260K", "messages": [{"role": "user", "content": "` + longText(400) + `"}]}`, 400, "maximum context length is 256 tokens"},
		{"/api/nothing", `{}`, 404, "not an endpoint"},
	} {
		code, _, b := d.post(c.path, c.body)
		var e struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(b, &e); err != nil || code != c.code || !strings.Contains(e.Error, c.says) {
			t.Errorf("%s %.40s: %d %s, want %d and %q", c.path, c.body, code, b, c.code, c.says)
		}
	}
}
