package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/sidecar"
)

// door is a real ctxd (a private daemon on stories260K) with the HTTP door
// in front of it on a loopback port.
type door struct {
	t       *testing.T
	p       *sidecar.Private
	srv     *Server
	base    string // http://127.0.0.1:PORT
	openai  openai.Client
	stopped chan struct{}
	close   func() // stops the door and the daemon (also at cleanup)
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("CTXD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startDoor starts a daemon with sc (the model filled in) and the door
// with hc (Addr defaults to a free loopback port).
func startDoor(t *testing.T, sc sidecar.Config, hc Config) *door {
	t.Helper()
	return startDoorWith(t, sc, hc, nil)
}

// startDoorWith is startDoor with the door's backend wrapped by wrap (nil:
// the daemon itself).
func startDoorWith(t *testing.T, sc sidecar.Config, hc Config, wrap func(Backend) Backend) *door {
	t.Helper()
	if sc.ModelPath == "" {
		sc.ModelPath = testmodel.Stories(t)
	}
	if sc.ArenaBytes == 0 {
		sc.ArenaBytes = 64 << 20
	}
	if sc.TurnLatency == 0 {
		sc.TurnLatency = -1 // no prefill timing at load: tests need no latency bound
	}
	sc.Logger = testLogger(t)
	sc.Engine = llama.Backend{}
	p, err := sidecar.StartPrivate(sc)
	if err != nil {
		t.Fatal(err)
	}
	if hc.Addr == "" {
		hc.Addr = "127.0.0.1:0"
	}
	hc.Logger = sc.Logger
	var b Backend = p.Server
	if wrap != nil {
		b = wrap(b)
	}
	s := New(b, hc)
	ln, err := s.Listen()
	if err != nil {
		p.Stop()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &door{t: t, p: p, srv: s, base: "http://" + ln.Addr().String(), stopped: make(chan struct{})}
	go func() {
		defer close(d.stopped)
		s.Serve(ctx, ln)
	}()
	opts := []option.RequestOption{option.WithBaseURL(d.base + "/v1"), option.WithAPIKey("x"), option.WithMaxRetries(0)}
	if hc.APIKey != "" {
		opts[1] = option.WithAPIKey(hc.APIKey)
	}
	d.openai = openai.NewClient(opts...)
	var once sync.Once
	d.close = func() {
		once.Do(func() {
			cancel()
			<-d.stopped
			p.Stop()
		})
	}
	t.Cleanup(d.close)
	return d
}

// post sends body to path and returns the status and the whole body.
func (d *door) post(path, body string, header ...string) (int, http.Header, []byte) {
	d.t.Helper()
	req, err := http.NewRequest("POST", d.base+path, strings.NewReader(body))
	if err != nil {
		d.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func (d *door) get(path string) (int, []byte) {
	d.t.Helper()
	resp, err := http.Get(d.base + path)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// idle waits until no request holds a session of the door.
func (d *door) idle() {
	d.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		busy := false
		for _, ls := range d.srv.table.snapshot() {
			busy = busy || ls.users > 0
		}
		if !busy {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	d.t.Fatal("a session stayed busy for 10 s")
}

func decodeJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("response is not JSON: %v: %s", err, b)
	}
	return m
}

// conversation is a chat history built turn by turn, as an agent does.
type conversation struct {
	system string
	msgs   []openai.ChatCompletionMessageParamUnion
}

func (c *conversation) params(user string, maxTokens int64) openai.ChatCompletionNewParams {
	c.msgs = append(c.msgs, openai.UserMessage(user))
	all := append([]openai.ChatCompletionMessageParamUnion{openai.SystemMessage(c.system)}, c.msgs...)
	return openai.ChatCompletionNewParams{Model: "stories260K", Messages: all, MaxTokens: openai.Int(maxTokens)}
}

func (c *conversation) reply(text string) {
	c.msgs = append(c.msgs, openai.AssistantMessage(text))
}

// longText is n words of story text, so prompts have some size.
func longText(n int) string {
	words := strings.Fields("once upon a time there was a little girl named lily she liked to play in the park with her friend tom one day they found a big red ball under a tree")
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[i%len(words)])
	}
	return b.String()
}
