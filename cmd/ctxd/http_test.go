package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/sidecar"
)

// TestHotDefaults: without flags the hot budget is derived (auto); an
// explicit ctx asks for a dense context; --hot 0 is dense.
func TestHotDefaults(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  envMap
		want int
	}{
		{nil, envMap{}, sidecar.HotAuto},
		{[]string{"--ctx", "4096"}, envMap{}, 0},
		{nil, envMap{"CTXD_CTX": "4096"}, 0},
		{[]string{"--ctx", "4096", "--hot", "auto"}, envMap{}, 0},
		{[]string{"--hot", "0"}, envMap{}, 0},
		{[]string{"--hot", "1024"}, envMap{}, 1024},
		{nil, envMap{"CTXD_HOT": "auto"}, sidecar.HotAuto},
	} {
		inv, err := parse(t, c.env, c.args...)
		if err != nil {
			t.Fatalf("%v %v: %v", c.args, c.env, err)
		}
		if got := inv.cfg.server.HotTokens; got != c.want {
			t.Errorf("%v %v: hot %d, want %d", c.args, c.env, got, c.want)
		}
	}
	if _, err := parse(t, envMap{}, "--hot", "-5"); err == nil || !strings.Contains(err.Error(), "auto") {
		t.Errorf("--hot -5: %v", err)
	}
}

// TestHTTPSettings: the HTTP keys, and the API key never printed.
func TestHTTPSettings(t *testing.T) {
	inv, err := parse(t, envMap{"CTXD_API_KEY": "sekret-key"}, "--http", "127.0.0.1:9999", "--model-name", "qwen-local", "--http-sessions", "4")
	if err != nil {
		t.Fatal(err)
	}
	h := inv.cfg.http
	if h.Addr != "127.0.0.1:9999" || h.APIKey != "sekret-key" || h.ModelName != "qwen-local" || h.MaxSessions != 4 {
		t.Errorf("http config %+v", h)
	}
	var out bytes.Buffer
	inv.cfg.print(&out)
	if strings.Contains(out.String(), "sekret-key") || !regexp.MustCompile(`(?m)^api-key +=\s+"\(set\)"`).MatchString(out.String()) {
		t.Errorf("print-config shows the key or not its presence:\n%s", out.String())
	}
	inv, _ = parse(t, envMap{})
	if inv.cfg.http.Addr != "127.0.0.1:11435" {
		t.Errorf("default http address %q", inv.cfg.http.Addr)
	}
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestServesHTTP: ctxd --model FILE (hot set derived) answers the OpenAI
// API on --http, with a prompt longer than the model's trained window.
func TestServesHTTP(t *testing.T) {
	p := newPaths(t)
	addr := freePort(t)
	d := startDaemon(t, "--model", testmodel.Stories(t), "--socket", p.socket, "--data-dir", p.dataDir, "--http", addr, "--arena-bytes", "67108864", "--turn-latency", "-1s")
	dialReady(t, d, p.socket)
	resp, err := http.Get("http://" + addr + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"hot_set":true`) {
		t.Fatalf("/v1/models: %d %s", resp.StatusCode, b)
	}
	// 2,200 words: more tokens than stories260K's trained window of 2,048.
	story := strings.Repeat("Lily and Tom played with a big red ball in the park. ", 200)
	body, _ := json.Marshal(map[string]any{"messages": []any{map[string]string{"role": "user", "content": story}}, "max_tokens": 4})
	resp, err = http.Post("http://"+addr+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var r struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(b, &r); resp.StatusCode != 200 || r.Usage.PromptTokens <= 2048 {
		t.Errorf("long prompt: %d %s", resp.StatusCode, b)
	}
}

// TestDefaultHTTPAddressTaken: when the default address is in use ctxd
// serves the socket anyway, with a warning; an explicit one that is taken
// is an error.
func TestDefaultHTTPAddressTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:11435")
	if err == nil {
		defer ln.Close()
	} // else someone else holds it: taken either way
	p := newPaths(t)
	d := startDaemon(t, p.args(testmodel.Stories(t))...)
	dialReady(t, d, p.socket)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(d.stderr.String(), "HTTP API off") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(d.stderr.String(), "HTTP API off") {
		t.Errorf("no warning about the taken default address:\n%s", d.stderr.String())
	}

	busy := freePortHeld(t)
	p2 := newPaths(t)
	d2 := startDaemon(t, append(p2.args(testmodel.Stories(t)), "--http", busy)...)
	if code := d2.wait(t, 20*time.Second); code != 1 || !strings.Contains(d2.stderr.String(), "http:") {
		t.Errorf("explicit taken address: exit %d\n%s", code, d2.stderr.String())
	}
}

// freePortHeld is a loopback address that stays taken for the test.
func freePortHeld(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}
