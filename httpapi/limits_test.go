package httpapi

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestTooManyMessagesRefusedFirst: a body of 50,000 messages (2 MB) is
// refused at once with a 413 naming the limit, before any rendering.
// Before, it was rendered (quadratically) for minutes, past its client.
func TestTooManyMessagesRefusedFirst(t *testing.T) {
	g := startGuarded(t, &scripted{pieces: []string{"hi"}}, Config{}, nil)
	var b strings.Builder
	b.WriteString(`{"messages":[`)
	for i := range 50_000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role":"%s","content":"message %d"}`, []string{"user", "assistant"}[i%2], i)
	}
	b.WriteString(`]}`)
	body := b.String()
	for _, path := range []string{"/v1/chat/completions", "/api/chat"} {
		t0 := time.Now()
		got := rawRequest(t, g.addr, fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body))
		if !strings.HasPrefix(got, "HTTP/1.1 413") || !strings.Contains(got, "MaxMessages") {
			t.Errorf("%s: 50,000 messages: %.300q", path, got)
		}
		if d := time.Since(t0); d > 2*time.Second {
			t.Errorf("%s: refusing took %v", path, d)
		}
	}
	if n := g.b.calls.Load(); n > 0 {
		t.Errorf("the daemon was called %d times", n)
	}
}
