package httpapi

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/ctxd/ctxd/sidecar"
)

func sessionOf(t *testing.T, h *http.Response) uint64 {
	t.Helper()
	id, err := strconv.ParseUint(h.Header.Get("X-Ctxd-Session"), 10, 64)
	if err != nil {
		t.Fatalf("X-Ctxd-Session %q", h.Header.Get("X-Ctxd-Session"))
	}
	return id
}

// TestSessionMappingByHeader: x-session-id (and prompt_cache_key) pick the
// session; two keys with the same prompt get two sessions.
func TestSessionMappingByHeader(t *testing.T) {
	d := startDoor(t, sidecar.Config{HotTokens: sidecar.HotAuto, NoCold: true}, Config{})
	ctx := context.Background()
	ask := func(conv *conversation, user string, opts ...option.RequestOption) (uint64, *openai.ChatCompletion) {
		var h *http.Response
		r, err := d.openai.Chat.Completions.New(ctx, conv.params(user, 4), append(opts, option.WithResponseInto(&h))...)
		if err != nil {
			t.Fatal(err)
		}
		conv.reply(r.Choices[0].Message.Content)
		return sessionOf(t, h), r
	}
	sys := "You are opencode. " + longText(200)
	a, b := &conversation{system: sys}, &conversation{system: sys}
	sa, _ := ask(a, "task A", option.WithHeader("X-Session-Id", "ses_a"))
	sb, _ := ask(b, "task A", option.WithHeader("X-Session-Id", "ses_b"))
	if sa == sb {
		t.Errorf("two x-session-id values shared session %d", sa)
	}
	sa2, r := ask(a, "more", option.WithHeader("X-Session-Affinity", "ses_a"))
	if sa2 != sa {
		t.Errorf("x-session-affinity ses_a went to session %d, not %d", sa2, sa)
	}
	if r.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Error("the keyed session reused nothing")
	}
	c := &conversation{system: sys}
	pk := option.WithJSONSet("prompt_cache_key", "cache-key-1")
	sc1, _ := ask(c, "task C", pk)
	sc2, _ := ask(c, "more", pk)
	if sc1 != sc2 || sc1 == sa || sc1 == sb {
		t.Errorf("prompt_cache_key sessions %d, %d (others %d, %d)", sc1, sc2, sa, sb)
	}
}

// TestSessionMappingByPrefixAndSideRequests: without a key a request goes
// to the live session with the longest common prefix; a side request with
// another system prompt gets its own session and the main conversation's
// reuse is untouched (Qwen Code's memory extractor after each turn).
func TestSessionMappingByPrefixAndSideRequests(t *testing.T) {
	d := startDoor(t, sidecar.Config{HotTokens: sidecar.HotAuto, NoCold: true}, Config{})
	ctx := context.Background()
	main := &conversation{system: "You are Qwen Code, an interactive CLI agent. " + longText(1000)}
	var mainSession uint64
	prev := int64(0)
	for turn, user := range []string{"List the files in this folder.", "Read main.py.", "Explain it."} {
		var h *http.Response
		r, err := d.openai.Chat.Completions.New(ctx, main.params(user, 6), option.WithResponseInto(&h))
		if err != nil {
			t.Fatal(err)
		}
		s := sessionOf(t, h)
		if turn == 0 {
			mainSession = s
		} else if s != mainSession {
			t.Errorf("turn %d of the main conversation went to session %d, not %d", turn+1, s, mainSession)
		}
		cached := r.Usage.PromptTokensDetails.CachedTokens
		t.Logf("main turn %d: prompt %d cached %d", turn+1, r.Usage.PromptTokens, cached)
		if turn > 0 && float64(cached) < 0.9*float64(prev) {
			t.Errorf("main turn %d: cached %d < 0.9 × previous prompt %d (a side request took its KV?)", turn+1, cached, prev)
		}
		prev = r.Usage.PromptTokens
		main.reply(r.Choices[0].Message.Content)

		// The memory extractor: another system prompt, the same history.
		side := &conversation{system: "You are now acting as the managed memory extraction subagent. " + longText(500), msgs: append([]openai.ChatCompletionMessageParamUnion(nil), main.msgs...)}
		var sh *http.Response
		if _, err := d.openai.Chat.Completions.New(ctx, side.params("Extract memories.", 4), option.WithResponseInto(&sh)); err != nil {
			t.Fatal(err)
		}
		if s := sessionOf(t, sh); s == mainSession {
			t.Fatalf("the side request went to the main session %d", s)
		}
	}
	if n := len(d.srv.table.snapshot()); n != 2 {
		t.Errorf("%d live sessions, want main + side", n)
	}
}

// TestSessionCap: beyond MaxSessions the least recently used session is
// closed; the rest keep their KV.
func TestSessionCap(t *testing.T) {
	d := startDoor(t, sidecar.Config{HotTokens: sidecar.HotAuto, NoCold: true}, Config{MaxSessions: 2})
	ctx := context.Background()
	ids := map[uint64]bool{}
	for i, key := range []string{"k1", "k2", "k3"} {
		conv := &conversation{system: "Stories " + strconv.Itoa(i)}
		var h *http.Response
		if _, err := d.openai.Chat.Completions.New(ctx, conv.params("hi", 2), option.WithHeader("X-Session-Id", key), option.WithResponseInto(&h)); err != nil {
			t.Fatal(err)
		}
		ids[sessionOf(t, h)] = true
	}
	live := d.srv.table.snapshot()
	if len(live) != 2 || len(ids) != 3 {
		t.Fatalf("%d live sessions of %d opened, want 2 of 3", len(live), len(ids))
	}
	for _, ls := range live {
		if ls.key == "k1" {
			t.Error("the least recently used session k1 is still live")
		}
	}
}

// TestResumeAfterRestart: a restarted ctxd has no live HTTP sessions, but
// the session the old one snapshotted at shutdown comes back on the first
// request (the daemon's cross-session resume), instead of a full prefill.
func TestResumeAfterRestart(t *testing.T) {
	dataDir := t.TempDir()
	conv := &conversation{system: "You are a coding agent. " + longText(600)}
	params := conv.params("List the files.", 4)
	d := startDoor(t, sidecar.Config{ContextTokens: 2048, DataDir: dataDir}, Config{})
	first, err := d.openai.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	d.close()

	d2 := startDoor(t, sidecar.Config{ContextTokens: 2048, DataDir: dataDir}, Config{})
	again, err := d2.openai.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("before the restart: prompt %d cached %d; after: cached %d (%s)", first.Usage.PromptTokens, first.Usage.PromptTokensDetails.CachedTokens,
		again.Usage.PromptTokensDetails.CachedTokens, again.JSON.ExtraFields["ctxd"].Raw())
	if c := again.Usage.PromptTokensDetails.CachedTokens; float64(c) < 0.9*float64(first.Usage.PromptTokens) {
		t.Errorf("after a restart only %d of %d prompt tokens came back", c, first.Usage.PromptTokens)
	}
}

// TestSessionTableStaysCapped: many conversations at once never hold more
// than MaxSessions sessions; a request that finds every session busy
// waits for one to be released (before, the table grew past the cap: 48
// of 16 under load).
func TestSessionTableStaysCapped(t *testing.T) {
	f := &scripted{pieces: []string{"ok"}, prefillDelay: 100 * time.Millisecond}
	base, _ := startScripted(t, f, Config{MaxSessions: 2})
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := `{"messages":[{"role":"system","content":"conversation ` + strconv.Itoa(i) + ` ` + longText(20) + `"},{"role":"user","content":"hi"}],"max_tokens":2}`
			req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("X-Session-Id", "k"+strconv.Itoa(i))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[200] != 8 {
		t.Errorf("status codes %v, want 8 × 200", codes)
	}
	if f.maxOpen() > 2 {
		t.Errorf("%d daemon sessions open at once, cap 2", f.maxOpen())
	}
}
