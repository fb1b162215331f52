package httpapi

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/ctxd/ctxd/sidecar"
)

// TestSubAgentReusesTheMainSessionsTools (stories260K): a sub-agent (its
// own x-session-id, its own system prompt, the main conversation's tools)
// gets a session of its own, and the tools' KV is copied from the main
// session's: usage reports it as approximate, the system prompt as
// prefilled. With X-Ctxd-Reuse: exact nothing is copied.
func TestSubAgentReusesTheMainSessionsTools(t *testing.T) {
	t.Run("dense", func(t *testing.T) {
		subAgentReuse(t, startDoor(t, sidecar.Config{HotTokens: 0, ContextTokens: 4096, ReuseLatency: time.Nanosecond}, Config{}))
	})
	t.Run("hot", func(t *testing.T) {
		subAgentReuse(t, startDoor(t, sidecar.Config{HotTokens: sidecar.HotAuto, ReuseLatency: time.Nanosecond}, Config{}))
	})
}

func subAgentReuse(t *testing.T, d *door) {
	tools := make([]map[string]any, 4)
	for i := range tools {
		tools[i] = map[string]any{"type": "function", "function": map[string]any{
			"name": []string{"read", "write", "grep", "task"}[i], "description": longText(120 + 10*i),
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"path": map[string]string{"type": "string"}}},
		}}
	}
	body := func(system, user string) string {
		b, err := json.Marshal(map[string]any{"max_tokens": 2, "tools": tools, "messages": []map[string]string{
			{"role": "system", "content": system}, {"role": "user", "content": user}}})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	status, hdr, _ := d.post("/v1/chat/completions", body("You are the main agent. "+longText(80), "tell a story"), "X-Session-Id", "main")
	if status != http.StatusOK {
		t.Fatalf("main request: %d", status)
	}
	mainSession := hdr.Get("X-Ctxd-Session")
	subBody := body("You are a sub-agent that answers one task. "+longText(30), "find the ball")
	status, hdr, b := d.post("/v1/chat/completions", subBody, "X-Session-Id", "sub", "X-Parent-Session-Id", "main")
	var r struct {
		Usage reuseUsage `json:"usage"`
	}
	if status != http.StatusOK || json.Unmarshal(b, &r) != nil {
		t.Fatalf("sub-agent request: %d %s", status, b)
	}
	u := r.Usage
	t.Logf("sub-agent: %+v (session %s, main %s)", u, hdr.Get("X-Ctxd-Session"), mainSession)
	if hdr.Get("X-Ctxd-Session") == mainSession {
		t.Fatal("the sub-agent ran on the main session")
	}
	if u.PromptTokensDetails.ApproximateCachedTokens < 400 || u.PromptTokensDetails.CachedTokens+u.PromptTokensDetails.ApproximateCachedTokens >= u.PromptTokens {
		t.Fatalf("sub-agent usage %+v: want the tools copied from the main session (approximate), the rest prefilled", u)
	}
	// Exact asked (a new sub-agent): nothing is copied.
	status, _, b = d.post("/v1/chat/completions", subBody, "X-Session-Id", "sub2", ReuseHeader, "exact")
	r.Usage = reuseUsage{}
	if status != http.StatusOK || json.Unmarshal(b, &r) != nil || r.Usage.PromptTokensDetails.ApproximateCachedTokens != 0 {
		t.Fatalf("exact sub-agent: %d %+v", status, r.Usage)
	}
}
