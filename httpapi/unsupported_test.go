package httpapi

import (
	"fmt"
	"strings"
	"testing"
)

func post(t *testing.T, addr, path, body string) string {
	t.Helper()
	return rawRequest(t, addr, fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body))
}

// TestUnhonouredFieldsRefused: fields ctxd would ignore are refused with a
// 400 naming them; the values that ask for nothing pass. Before, all of
// them were ignored silently.
func TestUnhonouredFieldsRefused(t *testing.T) {
	g := startGuarded(t, &scripted{pieces: []string{"hi"}}, Config{}, nil)
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct{ path, body, field string }{
		{"/v1/chat/completions", `{` + msgs + `,"logprobs":true}`, "logprobs"},
		{"/v1/chat/completions", `{` + msgs + `,"top_logprobs":3}`, "top_logprobs"},
		{"/v1/chat/completions", `{` + msgs + `,"response_format":{"type":"json_object"}}`, "response_format"},
		{"/v1/chat/completions", `{` + msgs + `,"tool_choice":"required"}`, "tool_choice"},
		{"/v1/chat/completions", `{` + msgs + `,"tool_choice":{"type":"function","function":{"name":"f"}}}`, "tool_choice"},
		{"/v1/completions", `{"prompt":"a","suffix":"b"}`, "suffix"},
		{"/v1/completions", `{"prompt":"a","best_of":3}`, "best_of"},
		{"/v1/completions", `{"prompt":"a","logprobs":2}`, "logprobs"},
		{"/api/chat", `{` + msgs + `,"format":"json"}`, "format"},
		{"/api/generate", `{"prompt":"a","format":{"type":"object"}}`, "format"},
	} {
		got := post(t, g.addr, c.path, c.body)
		if !strings.HasPrefix(got, "HTTP/1.1 400") || !strings.Contains(got, c.field) || !strings.Contains(got, "not supported") {
			t.Errorf("%s %s: %.200q, want a 400 naming %s", c.path, c.body, got, c.field)
		}
	}
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{` + msgs + `,"logprobs":false,"response_format":{"type":"text"},"tool_choice":"auto","max_tokens":2}`},
		{"/v1/completions", `{"prompt":"a","best_of":1,"suffix":null,"max_tokens":2}`},
		{"/api/chat", `{` + msgs + `,"format":"","stream":false}`},
	} {
		if got := post(t, g.addr, c.path, c.body); !strings.HasPrefix(got, "HTTP/1.1 200") {
			t.Errorf("%s %s: %.300q, want 200", c.path, c.body, got)
		}
	}
}

// TestShowAndPSLeakNothing: /api/show names the model file without its
// folder, /api/ps lists sessions without their keys.
func TestShowAndPSLeakNothing(t *testing.T) {
	g := startGuarded(t, &scripted{pieces: []string{"hi"}}, Config{}, nil)
	post(t, g.addr, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"user":"alice-secret-key","max_tokens":2}`)
	show := post(t, g.addr, "/api/show", `{"model":""}`)
	if !strings.HasPrefix(show, "HTTP/1.1 200") || strings.Contains(show, "/models/") || strings.Contains(show, "/work/") {
		t.Errorf("/api/show: %.400q", show)
	}
	ps := rawRequest(t, g.addr, "GET /api/ps HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if !strings.HasPrefix(ps, "HTTP/1.1 200") || strings.Contains(ps, "alice-secret-key") || !strings.Contains(ps, "ctxd_sessions") {
		t.Errorf("/api/ps: %.400q", ps)
	}
}
