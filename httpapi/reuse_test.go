package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/sidecar"
)

type reuseUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	PromptTokensDetails struct {
		CachedTokens            int `json:"cached_tokens"`
		ApproximateCachedTokens int `json:"approximate_cached_tokens"`
		RecomputedTokens        int `json:"recomputed_tokens"`
	} `json:"prompt_tokens_details"`
}

func chatBody(t *testing.T, system string, msgs ...string) string {
	t.Helper()
	all := []map[string]string{{"role": "system", "content": system}}
	for i, m := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		all = append(all, map[string]string{"role": role, "content": m})
	}
	b, err := json.Marshal(map[string]any{"messages": all, "max_tokens": 4})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func postUsage(t *testing.T, d *door, body string, header ...string) (int, reuseUsage) {
	t.Helper()
	status, _, b := d.post("/v1/chat/completions", body, header...)
	var r struct {
		Usage reuseUsage `json:"usage"`
	}
	if status == http.StatusOK {
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
	}
	return status, r.Usage
}

// TestUsageAfterAnEarlyChange: when the system prompt's date changes, the
// conversation after it is reused as approximate KV (segment reuse) and
// usage says so: cached_tokens counts only the exact reuse, the moved KV
// is approximate_cached_tokens; X-Ctxd-Reuse: exact asks for none.
func TestUsageAfterAnEarlyChange(t *testing.T) {
	t.Run("dense", func(t *testing.T) {
		usageAfterAnEarlyChange(t, startDoor(t, sidecar.Config{HotTokens: 0, ContextTokens: 4096, ReuseLatency: time.Nanosecond}, Config{}))
	})
	t.Run("hot", func(t *testing.T) {
		usageAfterAnEarlyChange(t, startDoor(t, sidecar.Config{HotTokens: sidecar.HotAuto, ReuseLatency: time.Nanosecond}, Config{}))
	})
}

func usageAfterAnEarlyChange(t *testing.T, d *door) {
	sys := "You tell short stories to children. " + longText(300)
	user, answer := longText(400), longText(200)
	if status, _ := postUsage(t, d, chatBody(t, sys+" Today is Monday.", user)); status != http.StatusOK {
		t.Fatalf("first request: %d", status)
	}
	status, u := postUsage(t, d, chatBody(t, sys+" Today is Tuesday.", user, answer, "and then?"))
	if status != http.StatusOK {
		t.Fatalf("second request: %d", status)
	}
	det := u.PromptTokensDetails
	t.Logf("after the date changed: %+v", u)
	if det.ApproximateCachedTokens < 300 || det.CachedTokens+det.ApproximateCachedTokens > u.PromptTokens || det.CachedTokens < 300 {
		t.Fatalf("after the date changed: usage %+v: want the user turn reused approximately, the system prompt's start exactly", u)
	}
	// Exact asked: nothing approximate is kept.
	status, u = postUsage(t, d, chatBody(t, sys+" Today is Tuesday.", user, answer, "and then?"), ReuseHeader, "exact")
	if status != http.StatusOK || u.PromptTokensDetails.ApproximateCachedTokens != 0 || u.PromptTokensDetails.CachedTokens >= u.PromptTokens-400 {
		t.Fatalf("exact: %d %+v", status, u)
	}
	if status, _, b := d.post("/v1/chat/completions", chatBody(t, sys), ReuseHeader, "fast"); status != http.StatusBadRequest || !strings.Contains(string(b), ReuseHeader) {
		t.Fatalf("bad reuse header: %d %s", status, b)
	}
}
