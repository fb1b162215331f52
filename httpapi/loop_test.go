package httpapi

import (
	"bufio"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// sseEvents posts body to path and returns the SSE event names in order.
func sseEvents(t *testing.T, url, body string, header ...string) []string {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var names []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			names = append(names, name)
		}
	}
	return names
}

// TestKeepAliveEveryDialect: while a prefill runs, Anthropic streams ping
// events after message_start and Responses repeats response.in_progress;
// the text follows.
func TestKeepAliveEveryDialect(t *testing.T) {
	base, _ := startScripted(t, &scripted{pieces: []string{"Done."}, prefillDelay: 600 * time.Millisecond}, Config{KeepAlive: 100 * time.Millisecond})
	ant := sseEvents(t, base+"/v1/messages?beta=true", `{"model":"claude-haiku-4-5","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if len(ant) < 5 || ant[0] != "message_start" || ant[1] != "ping" || ant[len(ant)-1] != "message_stop" {
		t.Errorf("Anthropic events %v", ant)
	}
	pings := 0
	for _, n := range ant {
		if n == "ping" {
			pings++
		}
	}
	if pings < 3 {
		t.Errorf("%d pings during a 600 ms prefill (keep-alive 100 ms): %v", pings, ant)
	}
	resp := sseEvents(t, base+"/v1/responses", `{"model":"gpt-5","stream":true,"input":"hi"}`)
	progress := 0
	for _, n := range resp {
		if n == "response.in_progress" {
			progress++
		}
	}
	if len(resp) < 6 || resp[0] != "response.created" || progress < 3 || resp[len(resp)-1] != "response.completed" {
		t.Errorf("Responses events %v", resp)
	}
}

// TestAKeylessRequestNeverWaitsBehindAnotherConversation (issue 19, item
// 8): two keyless agents whose short system prompts agree only in the
// template's preamble get two sessions, and the second runs beside the
// first's long prefill instead of after it.
func TestAKeylessRequestNeverWaitsBehindAnotherConversation(t *testing.T) {
	f := &scripted{pieces: []string{"ok"}, prefillDelay: 1500 * time.Millisecond}
	base, _ := startScripted(t, f, Config{})
	post := func(system string) (string, time.Duration) {
		start := time.Now()
		body := `{"model":"m","messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"go"}]}`
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return "", 0
		}
		resp.Body.Close()
		return resp.Header.Get("X-Ctxd-Session"), time.Since(start)
	}
	var wg sync.WaitGroup
	var sa, sb string
	var db time.Duration
	wg.Add(2)
	go func() { defer wg.Done(); sa, _ = post("You are a coding agent.") }()
	time.Sleep(200 * time.Millisecond)
	go func() { defer wg.Done(); sb, db = post("You are a title generator.") }()
	wg.Wait()
	if sa == "" || sa == sb {
		t.Errorf("two conversations shared session %q", sa)
	}
	if db > 2800*time.Millisecond {
		t.Errorf("the second conversation took %v: it waited behind the first's 1.5 s prefill", db)
	}
	// The same system prompt, a different conversation, while the first
	// is busy: a session of its own too.
	wg.Add(2)
	go func() { defer wg.Done(); sa, _ = post("You are a coding agent.") }()
	time.Sleep(200 * time.Millisecond)
	go func() {
		defer wg.Done()
		start := time.Now()
		body := `{"model":"m","messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"another task"}]}`
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err == nil {
			resp.Body.Close()
			sb, db = resp.Header.Get("X-Ctxd-Session"), time.Since(start)
		}
	}()
	wg.Wait()
	if sa == sb || db > 2800*time.Millisecond {
		t.Errorf("a branch of a busy conversation: sessions %s and %s, %v", sa, sb, db)
	}
}
