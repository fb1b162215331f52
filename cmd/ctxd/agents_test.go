package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxd/ctxd/internal/testmodel"
)

// The agent test runs real coding agents, unmodified, against a real ctxd
// serving stories260K over HTTP: Qwen Code and opencode (OpenAI Chat
// Completions), Claude Code (Anthropic Messages) and Codex (OpenAI
// Responses), each for three turns of one session (the second and third
// with --continue, or Codex's exec resume --last). Every run must exit 0,
// and from the second main request of a session on, the tokens ctxd
// reports reused (prompt_tokens_details.cached_tokens, Anthropic's
// cache_read_input_tokens, Responses' input_tokens_details.cached_tokens)
// must be at least 9/10 of the previous main request's prompt tokens.
//
// CTXD_TEST_AGENTS (a comma-separated list of qwen-code, opencode,
// claude-code, codex) runs only those agents.
//
// The agents come from .ci/setup (npm, pinned versions, into .agents/ at
// the repository root). They try to reach hosts of their own (telemetry,
// model lists, update checks), so the test re-runs itself, ctxd and the
// agents inside a network namespace that has only loopback. Outside CI
// the test is skipped when .agents/ is absent; under CI it must run.
//
// Between the agents and ctxd sits a recording proxy of the test's own,
// which reads each request's tools and each response's usage, exactly as
// the agent receives them.

const (
	envAgentsInside = "CTXD_TEST_AGENTS_NETNS" // set in the re-run inside the namespace
	envAgentsOnly   = "CTXD_TEST_AGENTS"       // only these agents (comma-separated names)
	agentTurns      = 3
	// agentMaxTokens bounds each reply (the agents ask for 8000 and
	// 32000): stories260K writes stories, not answers, and a reply's
	// length only adds prefill to the next turn.
	agentMaxTokens = 32
	agentTurnLimit = 15 * time.Minute
	agentPrompt    = "List the files in this folder"
)

// agentsDir is the folder .ci/setup installs the agents into.
func agentsDir(t *testing.T) string {
	root, err := testmodel.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, ".agents")
}

// agentsToRun are the agents the test runs: all, or those CTXD_TEST_AGENTS
// names.
func agentsToRun(t *testing.T, bin string) []agent {
	all := []agent{qwenAgent(bin), opencodeAgent(bin), claudeAgent(bin), codexAgent(bin)}
	only := os.Getenv(envAgentsOnly)
	if only == "" {
		return all
	}
	var out []agent
	for _, name := range strings.Split(only, ",") {
		found := false
		for _, a := range all {
			if a.name == strings.TrimSpace(name) {
				out, found = append(out, a), true
			}
		}
		if !found {
			t.Fatalf("%s: no agent %q (qwen-code, opencode, claude-code, codex)", envAgentsOnly, name)
		}
	}
	return out
}

func TestAgents(t *testing.T) {
	bin := filepath.Join(agentsDir(t), "node_modules", ".bin")
	agents := agentsToRun(t, bin)
	for _, a := range agents {
		if _, err := os.Stat(a.path); err != nil {
			if os.Getenv("CI") == "" {
				t.Skipf("agents not installed (%v): run .ci/setup", err)
			}
			t.Fatalf("CI is set but the agents are not installed (%v): .ci/setup installs them", err)
		}
	}
	if os.Getenv(envAgentsInside) != "1" {
		runInNetns(t)
		return
	}
	model := testmodel.Stories(t)
	loopbackUp(t)

	// ctxd at its default HTTP address: nothing else listens in this
	// namespace.
	p := newPaths(t)
	d := startCmd(t, daemonCmd(t, []string{"--model", model, "--socket", p.socket, "--data-dir", p.dataDir, "--log-level", "debug"}, nil), false)
	upstream := "http://127.0.0.1:11435"
	id := waitModel(t, d, upstream)

	rec := newRecorder(t, upstream)
	for _, a := range agents {
		t.Run(a.name, func(t *testing.T) {
			rec.reset()
			home := scratchHome(t)
			for turn := 1; turn <= agentTurns; turn++ {
				start := time.Now()
				out, err := a.run(t, home, rec.url, id, turn > 1)
				t.Logf("%s turn %d: %v, exit %v, %d bytes of output", a.name, turn, time.Since(start).Round(time.Millisecond), err, len(out))
				if err != nil {
					t.Fatalf("%s turn %d: %v\n%s\nctxd log (tail):\n%s", a.name, turn, err, tail(out, 4000), tail(d.stderr.String(), 4000))
				}
			}
			checkReuse(t, rec.calls())
		})
	}
}

// runInNetns runs TestAgents again in a child process inside a new network
// namespace (root, as under CI; otherwise in a new user namespace too).
func runInNetns(t *testing.T) {
	args := []string{"-test.run=^TestAgents$", "-test.v"}
	if dl, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout="+time.Until(dl).Round(time.Second).String())
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envAgentsInside+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() != 0 {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	// One writer for both, so that exec writes from one goroutine.
	var out bytes.Buffer
	w := io.MultiWriter(&out, prefixWriter{os.Stdout, "    netns: "})
	cmd.Stdout, cmd.Stderr = w, w
	err := cmd.Run()
	if cmd.ProcessState == nil {
		t.Fatalf("cannot make a network namespace (%v): run as root (as CI does), or allow unprivileged user namespaces", err)
	}
	text := out.String()
	switch {
	case err != nil:
		t.Fatalf("agents in a network namespace: %v", err)
	case strings.Contains(text, "--- SKIP: TestAgents"):
		t.Fatalf("the test skipped inside the namespace:\n%s", tail(text, 2000))
	case !strings.Contains(text, "--- PASS: TestAgents"):
		t.Fatalf("agents in a network namespace: no PASS line:\n%s", tail(text, 4000))
	}
}

// prefixWriter writes each line with a prefix (the child's log, streamed).
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	s := strings.ReplaceAll(strings.TrimSuffix(string(b), "\n"), "\n", "\n"+p.prefix)
	fmt.Fprintf(p.w, "%s%s\n", p.prefix, s)
	return len(b), nil
}

// loopbackUp brings lo up in this (new) network namespace.
func loopbackUp(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		t.Fatalf("lo flags: %v", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		t.Fatalf("lo up: %v", err)
	}
	// Only loopback: the agents' own hosts are unreachable.
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 && i.Flags&net.FlagUp != 0 {
			t.Fatalf("interface %s is up in the namespace", i.Name)
		}
	}
}

// waitModel waits for ctxd's HTTP API and returns the model id it serves.
func waitModel(t *testing.T, d *daemon, base string) string {
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(base + "/v1/models")
		if err == nil {
			var list struct {
				Data []struct {
					ID string `json:"id"`
				} `json:"data"`
			}
			err = json.NewDecoder(resp.Body).Decode(&list)
			resp.Body.Close()
			if err == nil && len(list.Data) == 1 {
				return list.Data[0].ID
			}
		}
		if d.exited() {
			t.Fatalf("ctxd exited with %d; output:\n%s", d.state.ExitCode(), d.stderr.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("ctxd's HTTP API not answering: %v; output:\n%s", err, d.stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scratchHome makes a home folder holding a small git repository, the
// agents' working folder.
func scratchHome(t *testing.T) string {
	home := t.TempDir()
	repo := filepath.Join(home, "repo")
	files := map[string]string{
		"main.py":   "def add(a, b):\n    return a + b\n\n\nif __name__ == \"__main__\":\n    print(add(2, 3))\n",
		"README.md": "# demo\n\nAdds two numbers.\n",
	}
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("git", "-C", repo, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	return home
}

// agent is one coding agent's headless command line.
type agent struct {
	name string
	// command returns the turn's arguments and extra environment.
	command func(home, baseURL, model string, more bool) ([]string, []string)
	path    string
}

// run runs one turn in home's repository and returns its output.
func (a agent) run(t *testing.T, home, baseURL, model string, more bool) ([]byte, error) {
	args, env := a.command(home, baseURL, model, more)
	ctx, cancel := context.WithTimeout(context.Background(), agentTurnLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.path, args...)
	cmd.Dir = filepath.Join(home, "repo")
	cmd.Env = append(agentEnv(home, filepath.Dir(a.path)), env...)
	cmd.Stdin = nil
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w after %v", ctx.Err(), agentTurnLimit)
	}
	return out, err
}

// agentEnv is a hermetic environment in home: HOME and XDG folders there,
// PATH with the agents and the system tools, no CTXD_* settings.
func agentEnv(home, bin string) []string {
	env := []string{
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"),
		"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"XDG_STATE_HOME=" + filepath.Join(home, ".local", "state"),
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"TERM=dumb",
		"NO_COLOR=1",
		"CI=1",
	}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "LANG=") || strings.HasPrefix(kv, "TZ=") {
			env = append(env, kv)
		}
	}
	return env
}

// qwenAgent is Qwen Code: qwen -p PROMPT --auth-type openai --yolo
// --output-format json, then the same with --continue. Telemetry, usage
// statistics, update checks and the API preconnect are off.
func qwenAgent(bin string) agent {
	return agent{name: "qwen-code", path: filepath.Join(bin, "qwen"), command: func(home, baseURL, model string, more bool) ([]string, []string) {
		settings := filepath.Join(home, ".qwen", "settings.json")
		if _, err := os.Stat(settings); err != nil {
			os.MkdirAll(filepath.Dir(settings), 0o755)
			os.WriteFile(settings, []byte(`{"general":{"enableAutoUpdate":false},"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false}}`), 0o644)
		}
		args := []string{"-p", agentPrompt, "--auth-type", "openai", "--yolo", "--output-format", "json"}
		if more {
			args = append(args, "--continue")
		}
		return args, []string{
			"OPENAI_BASE_URL=" + baseURL + "/v1", "OPENAI_API_KEY=x", "OPENAI_MODEL=" + model,
			"QWEN_TELEMETRY_ENABLED=false", "QWEN_CODE_DISABLE_PRECONNECT=1",
			fmt.Sprintf("QWEN_CODE_MAX_OUTPUT_TOKENS=%d", agentMaxTokens),
		}
	}}
}

// opencodeAgent is opencode: opencode run --format json WORDS..., then run
// --continue, with the local provider @ai-sdk/openai-compatible (bundled
// in the opencode binary: nothing is downloaded). Model list fetches and
// auto-update are off.
func opencodeAgent(bin string) agent {
	return agent{name: "opencode", path: filepath.Join(bin, "opencode"), command: func(home, baseURL, model string, more bool) ([]string, []string) {
		cfg := map[string]any{
			"model": "local/" + model, "small_model": "local/" + model,
			"autoupdate": false, "share": "disabled",
			"provider": map[string]any{"local": map[string]any{
				"npm":     "@ai-sdk/openai-compatible",
				"options": map[string]any{"baseURL": baseURL + "/v1", "apiKey": "x", "includeUsage": true},
				"models": map[string]any{model: map[string]any{"name": model,
					"limit": map[string]any{"context": 1 << 24, "output": agentMaxTokens}}},
			}},
		}
		c, _ := json.Marshal(cfg)
		args := []string{"run", "--format", "json"}
		if more {
			args = append(args, "--continue")
		}
		return append(args, strings.Fields(agentPrompt)...), []string{
			"OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_CONFIG_CONTENT=" + string(c),
		}
	}}
}

// claudeAgent is Claude Code: claude -p PROMPT --output-format json, then
// the same with --continue. Nonessential traffic (telemetry, updates,
// model checks) is off. Replies are capped with its own settings: at most
// agentMaxTokens (CLAUDE_CODE_MAX_OUTPUT_TOKENS), ending at the first
// punctuation mark (stop_sequences through CLAUDE_CODE_EXTRA_BODY), since
// Claude Code takes a reply cut by max_tokens for an error and
// stories260K never ends one by itself.
func claudeAgent(bin string) agent {
	return agent{name: "claude-code", path: filepath.Join(bin, "claude"), command: func(home, baseURL, model string, more bool) ([]string, []string) {
		args := []string{"-p", agentPrompt, "--output-format", "json"}
		if more {
			args = append(args, "--continue")
		}
		return args, []string{
			"ANTHROPIC_BASE_URL=" + baseURL, "ANTHROPIC_API_KEY=x", "ANTHROPIC_MODEL=" + model,
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1",
			fmt.Sprintf("CLAUDE_CODE_MAX_OUTPUT_TOKENS=%d", agentMaxTokens),
			`CLAUDE_CODE_EXTRA_BODY={"stop_sequences":[".",",","!","?"]}`,
		}
	}}
}

// codexAgent is Codex: codex exec with a local model provider speaking the
// Responses API, then codex exec resume --last. Codex has no setting for a
// reply's length: its provider sends ctxd's X-Ctxd-Max-Tokens header.
func codexAgent(bin string) agent {
	return agent{name: "codex", path: filepath.Join(bin, "codex"), command: func(home, baseURL, model string, more bool) ([]string, []string) {
		args := []string{"exec"}
		if more {
			args = append(args, "resume", "--last")
		}
		args = append(args, "--skip-git-repo-check", "-c", "model_provider=local",
			"-c", fmt.Sprintf(`model_providers.local={name="local",base_url="%s/v1",wire_api="responses",env_key="LOCAL_KEY",http_headers={"X-Ctxd-Max-Tokens"="%d"}}`, baseURL, agentMaxTokens),
			"-m", model, agentPrompt)
		return args, []string{"LOCAL_KEY=x"}
	}}
}

// call is one chat request the proxy saw and what ctxd answered.
type call struct {
	status              int
	tools, messages     int
	stream              bool
	promptTokens        int
	cachedTokens        int
	hasUsage            bool
	start               time.Time
	elapsed             time.Duration // until the response body was read
	firstByte           time.Duration // until the response body's first byte
	firstText           time.Duration // until the first generated text (streams)
	firstSystemPrefix   string
	completionTokens    int
	finishReason, model string
}

// recorder is a reverse proxy to ctxd that records chat calls.
type recorder struct {
	url string
	mu  sync.Mutex
	log []call
}

func newRecorder(t *testing.T, upstream string) *recorder {
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.FlushInterval = -1
	proxy.ModifyResponse = func(resp *http.Response) error {
		c, ok := resp.Request.Context().Value(callKey{}).(*call)
		if !ok {
			return nil
		}
		c.status = resp.StatusCode
		resp.Body = &usageReader{body: resp.Body, c: c, done: func() { r.add(*c) }}
		return nil
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost && (strings.HasSuffix(req.URL.Path, "/chat/completions") ||
			strings.HasSuffix(req.URL.Path, "/v1/messages") || strings.HasSuffix(req.URL.Path, "/v1/responses")) {
			body, err := io.ReadAll(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
			c := &call{start: time.Now()}
			describeRequest(body, c)
			req = req.WithContext(context.WithValue(req.Context(), callKey{}, c))
		}
		proxy.ServeHTTP(w, req)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	r.url = "http://" + ln.Addr().String()
	return r
}

type callKey struct{}

func (r *recorder) add(c call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, c)
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = nil
}

func (r *recorder) calls() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.log...)
}

// describeRequest notes what classifies a chat request: its tools, its
// messages and the start of its system prompt.
func describeRequest(body []byte, c *call) {
	var req struct {
		Model    string            `json:"model"`
		Stream   bool              `json:"stream"`
		Tools    []json.RawMessage `json:"tools"`
		Input    json.RawMessage   `json:"input"` // Responses
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil {
		return
	}
	c.tools, c.messages, c.stream, c.model = len(req.Tools), len(req.Messages), req.Stream, req.Model
	var items []json.RawMessage
	if json.Unmarshal(req.Input, &items) == nil && len(items) > 0 {
		c.messages = len(items)
	}
	if len(req.Messages) > 0 && req.Messages[0].Role == "system" {
		c.firstSystemPrefix = string(req.Messages[0].Content[:min(len(req.Messages[0].Content), 200)])
	}
}

// usageReader passes a response through and reads its usage: the last SSE
// chunk that carries one, or the JSON body's.
type usageReader struct {
	body io.ReadCloser
	c    *call
	buf  bytes.Buffer
	done func()
	once sync.Once
}

func (u *usageReader) Read(p []byte) (int, error) {
	n, err := u.body.Read(p)
	if n > 0 && u.c.firstByte == 0 {
		u.c.firstByte = time.Since(u.c.start)
	}
	if n > 0 && u.c.firstText == 0 && textEvent(p[:n]) {
		u.c.firstText = time.Since(u.c.start)
	}
	u.buf.Write(p[:n])
	if err != nil {
		u.finish()
	}
	return n, err
}

func (u *usageReader) Close() error {
	u.finish()
	return u.body.Close()
}

// textEvent reports whether a piece of a stream carries generated text
// (any API's text delta).
func textEvent(b []byte) bool {
	if bytes.Contains(b, []byte(`"text_delta"`)) || bytes.Contains(b, []byte(`"response.output_text.delta"`)) {
		return true
	}
	// OpenAI chunks: a non-empty content (the keep-alive chunk's is "").
	i := bytes.Index(b, []byte(`"content":"`))
	return i >= 0 && i+11 < len(b) && b[i+11] != '"'
}

func (u *usageReader) finish() {
	u.once.Do(func() {
		// Every API's usage: OpenAI Chat (prompt_tokens, cached_tokens),
		// Anthropic (input_tokens + cache_read_input_tokens +
		// cache_creation_input_tokens, of which cache_read was reused),
		// Responses (input_tokens, input_tokens_details.cached_tokens,
		// inside response.completed's response).
		type usage struct {
			PromptTokens        *int `json:"prompt_tokens"`
			CompletionTokens    int  `json:"completion_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
			InputTokens              *int `json:"input_tokens"`
			CacheReadInputTokens     int  `json:"cache_read_input_tokens"`
			CacheCreationInputTokens int  `json:"cache_creation_input_tokens"`
			OutputTokens             int  `json:"output_tokens"`
			InputTokensDetails       *struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"input_tokens_details"`
		}
		type chunk struct {
			Type    string `json:"type"`
			Usage   *usage `json:"usage"`
			Choices []struct {
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			StopReason *string `json:"stop_reason"` // Anthropic, a whole message
			Delta      *struct {
				StopReason *string `json:"stop_reason"`
			} `json:"delta"` // Anthropic, message_delta
			Response *struct {
				Status string `json:"status"`
				Usage  *usage `json:"usage"`
			} `json:"response"` // Responses, response.completed
			Status string `json:"status"` // Responses, a whole response
		}
		take := func(data []byte) {
			var c chunk
			if json.Unmarshal(data, &c) != nil {
				return
			}
			us := c.Usage
			if c.Response != nil && c.Response.Usage != nil {
				us = c.Response.Usage
				u.c.finishReason = c.Response.Status
			}
			if c.Status != "" && c.Usage != nil {
				u.c.finishReason = c.Status
			}
			switch {
			case us == nil:
			case us.PromptTokens != nil:
				u.c.hasUsage = true
				u.c.promptTokens, u.c.cachedTokens, u.c.completionTokens = *us.PromptTokens, us.PromptTokensDetails.CachedTokens, us.CompletionTokens
			case us.InputTokensDetails != nil && us.InputTokens != nil: // Responses
				u.c.hasUsage = true
				u.c.promptTokens, u.c.cachedTokens, u.c.completionTokens = *us.InputTokens, us.InputTokensDetails.CachedTokens, us.OutputTokens
			case us.InputTokens != nil: // Anthropic
				u.c.hasUsage = true
				u.c.promptTokens = *us.InputTokens + us.CacheReadInputTokens + us.CacheCreationInputTokens
				u.c.cachedTokens, u.c.completionTokens = us.CacheReadInputTokens, us.OutputTokens
			}
			for _, ch := range c.Choices {
				if ch.FinishReason != nil {
					u.c.finishReason = *ch.FinishReason
				}
			}
			if c.StopReason != nil {
				u.c.finishReason = *c.StopReason
			}
			if c.Delta != nil && c.Delta.StopReason != nil {
				u.c.finishReason = *c.Delta.StopReason
			}
		}
		u.c.elapsed = time.Since(u.c.start)
		data := u.buf.Bytes()
		if !u.c.stream {
			take(data)
		} else {
			sc := bufio.NewScanner(bytes.NewReader(data))
			sc.Buffer(make([]byte, 0, 1<<16), 1<<26)
			for sc.Scan() {
				if line, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: ")); ok && len(line) > 0 && line[0] == '{' {
					take(line)
				}
			}
		}
		u.done()
	})
}

// checkReuse checks a session's main requests (those with the most tools:
// title, memory and sub-agent requests carry fewer): every one answered
// with usage, and from the second on at least 9/10 of the previous one's
// prompt tokens reused.
func checkReuse(t *testing.T, calls []call) {
	t.Helper()
	most := 0
	for _, c := range calls {
		most = max(most, c.tools)
	}
	var mains []call
	for i, c := range calls {
		kind := "side"
		if c.tools == most {
			kind = "main"
			mains = append(mains, c)
		}
		t.Logf("request %d (%s): %d messages, %d tools, status %d, prompt %d, cached %d, completion %d, finish %q, first byte %v, first text %v, all %v",
			i+1, kind, c.messages, c.tools, c.status, c.promptTokens, c.cachedTokens, c.completionTokens, c.finishReason,
			c.firstByte.Round(time.Millisecond), c.firstText.Round(time.Millisecond), c.elapsed.Round(time.Millisecond))
	}
	if len(mains) < agentTurns {
		t.Fatalf("%d main requests for %d turns", len(mains), agentTurns)
	}
	for i, c := range mains {
		if c.status != http.StatusOK || !c.hasUsage {
			t.Errorf("main request %d: status %d, usage %v", i+1, c.status, c.hasUsage)
			continue
		}
		if i == 0 {
			continue
		}
		prev := mains[i-1].promptTokens
		if 10*c.cachedTokens < 9*prev {
			t.Errorf("main request %d: %d cached tokens, under 9/10 of the previous request's %d prompt tokens", i+1, c.cachedTokens, prev)
		} else {
			t.Logf("main request %d reused %d tokens = %.3f x the previous prompt (%d)", i+1, c.cachedTokens, float64(c.cachedTokens)/float64(prev), prev)
		}
	}
}

// tail returns the last n bytes of s.
func tail[S string | []byte](s S, n int) string {
	if len(s) > n {
		return "…" + string(s[len(s)-n:])
	}
	return string(s)
}
