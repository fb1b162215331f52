package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/httpapi"
	"github.com/ctxd/ctxd/internal/chat"
	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/internal/clientconv"
	"github.com/ctxd/ctxd/sidecar"
)

// bench http: the recorded agent requests (../shared/agent-requests: one
// folder per session, N.json the N-th request with its headers and body)
// replayed through ctxd's HTTP API, reporting per request the prompt
// tokens, the tokens reused and the time to first byte; then the same
// session without its side requests (another system prompt), to show
// what they cost the main conversation; then the HTTP door's overhead
// against the Unix socket for the same turn and per streamed token.

type httpReplayRequest struct {
	N               int    `json:"n"`
	Side            bool   `json:"side"` // not served by the ctxd session that served most requests
	Session         string `json:"ctxd_session"`
	PromptTokens    int    `json:"prompt_tokens"`
	CachedTokens    int    `json:"cached_tokens"`             // exact reuse
	ApproxTokens    int    `json:"approximate_cached_tokens"` // segment reuse past an early change
	PrefilledTokens int    `json:"prefilled_tokens"`
	// ReuseOfPrevious is, from the 2nd request a ctxd session served on,
	// the reused tokens (exact and approximate) over the prompt tokens of
	// the previous request that session served.
	ReuseOfPrevious float64 `json:"reuse_of_previous,omitempty"`
	TTFBMS          float64 `json:"ttfb_ms"`
	TTFTMS          float64 `json:"ttft_ms"` // first generated text or tool call (streamed); the whole response otherwise
	TotalMS         float64 `json:"total_ms"`
}

type httpReplaySession struct {
	Name            string              `json:"name"`
	Requests        []httpReplayRequest `json:"requests"`
	MinMainReuse    float64             `json:"min_main_reuse"`            // over main requests from the 2nd on (grouped by ctxd session)
	MainOnlyReuse   []float64           `json:"main_only_reuse,omitempty"` // the same, replayed without side requests
	SideEffectDelta float64             `json:"side_effect_max_delta"`     // max |with − without| over main reuse ratios
	Sides           int                 `json:"side_requests"`
}

type httpOverhead struct {
	Reps            int     `json:"reps"`
	Tokens          int     `json:"tokens"`
	PromptTokens    int     `json:"prompt_tokens"`
	SocketTurnMS    float64 `json:"socket_turn_ms"`      // median, 1 token
	HTTPTurnMS      float64 `json:"http_turn_ms"`        // median, 1 token
	TurnOverheadMS  float64 `json:"turn_overhead_ms"`    // http − socket
	SocketPerTokUS  float64 `json:"socket_per_token_us"` // (turn of N tokens − turn of 1) / (N−1)
	HTTPPerTokUS    float64 `json:"http_per_token_us"`
	TokenOverheadUS float64 `json:"token_overhead_us"`
}

func benchHTTP(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("bench http", flag.ContinueOnError)
	dir := fs.String("requests", envOr("CTXD_AGENT_REQUESTS", "../shared/agent-requests"), "folder of recorded sessions (or one session folder)")
	only := fs.String("session", "", "replay only this session folder (e.g. opencode)")
	model := fs.String("model", defaultModel(), "model for the private daemon")
	url := fs.String("url", "", "replay against this ctxd HTTP API (http://127.0.0.1:11435) instead of a private daemon")
	maxTokens := fs.Int("max-tokens", 8, "max_tokens sent with each request (the recorded ones ask for thousands)")
	reps := fs.Int("reps", 21, "overhead benchmark repetitions (0: skip it)")
	noSides := fs.Bool("no-main-only", false, "skip the replay without side requests")
	noReplay := fs.Bool("no-replay", false, "only the overhead benchmark")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	var sessions []recordedSession
	if !*noReplay {
		var err error
		if sessions, err = loadRecorded(*dir, *only); err != nil {
			return err
		}
	}
	var out struct {
		Model    string              `json:"model"`
		Sessions []httpReplaySession `json:"sessions"`
		Overhead *httpOverhead       `json:"overhead,omitempty"`
	}
	out.Model = *model
	// Each replay gets a fresh daemon, so no session resumes another's KV.
	fresh := func(rs recordedSession) (string, func(), error) {
		if *url != "" {
			return strings.TrimRight(*url, "/"), func() {}, nil
		}
		// The door answers to the model name the agent was configured with.
		d, err := startHTTPDaemon(*model, recordedModel(rs), sidecar.Config{HotTokens: sidecar.HotAuto})
		if err != nil {
			return "", nil, err
		}
		return d.base, d.stop, nil
	}
	for _, rs := range sessions {
		base, stop, err := fresh(rs)
		if err != nil {
			return err
		}
		res, err := replayHTTP(ctx, e, base, rs, *maxTokens, false)
		stop()
		if err != nil {
			return fmt.Errorf("%s: %w", rs.name, err)
		}
		if res.Sides > 0 && !*noSides && *url == "" {
			base, stop, err := fresh(rs)
			if err != nil {
				return err
			}
			mo, err := replayHTTP(ctx, e, base, rs, *maxTokens, true)
			stop()
			if err != nil {
				return fmt.Errorf("%s without side requests: %w", rs.name, err)
			}
			with := mainReuse(res.Requests)
			res.MainOnlyReuse = mainReuse(mo.Requests)
			for i := range min(len(with), len(res.MainOnlyReuse)) {
				d := with[i] - res.MainOnlyReuse[i]
				res.SideEffectDelta = max(res.SideEffectDelta, d, -d)
			}
		}
		out.Sessions = append(out.Sessions, res)
		if !*asJSON {
			printHTTPReplay(e, res)
		}
	}
	if *reps > 0 && *url == "" {
		o, err := benchHTTPOverhead(ctx, *model, *reps)
		if err != nil {
			return fmt.Errorf("overhead: %w", err)
		}
		out.Overhead = o
		if !*asJSON {
			fmt.Fprintf(e.Stdout, "\noverhead (median of %d, %d-token prompt, dense): turn of 1 token socket %.2f ms, HTTP %.2f ms: +%.2f ms; per streamed token socket %.1f µs, HTTP %.1f µs: +%.1f µs\n",
				o.Reps, o.PromptTokens, o.SocketTurnMS, o.HTTPTurnMS, o.TurnOverheadMS, o.SocketPerTokUS, o.HTTPPerTokUS, o.TokenOverheadUS)
		}
	}
	if *asJSON {
		return e.PrintJSON(out)
	}
	return nil
}

func mainReuse(rs []httpReplayRequest) []float64 {
	var out []float64
	first := true
	for _, r := range rs {
		if r.Side {
			continue
		}
		if !first {
			out = append(out, r.ReuseOfPrevious)
		}
		first = false
	}
	return out
}

func printHTTPReplay(e *cli.Env, s httpReplaySession) {
	fmt.Fprintf(e.Stdout, "%s: %d requests (%d side)\n", s.Name, len(s.Requests), s.Sides)
	fmt.Fprintf(e.Stdout, "  %3s %-4s %-8s %7s %7s %7s %7s %8s %9s %9s %9s\n", "n", "kind", "session", "prompt", "cached", "approx", "prefill", "reuse", "ttfb_ms", "ttft_ms", "total_ms")
	for _, r := range s.Requests {
		kind, reuse := "main", "-"
		if r.Side {
			kind = "side"
		}
		if r.ReuseOfPrevious > 0 {
			reuse = fmt.Sprintf("%.3f", r.ReuseOfPrevious)
		}
		fmt.Fprintf(e.Stdout, "  %3d %-4s %-8s %7d %7d %7d %7d %8s %9.1f %9.1f %9.1f\n", r.N, kind, r.Session, r.PromptTokens, r.CachedTokens, r.ApproxTokens, r.PrefilledTokens, reuse, r.TTFBMS, r.TTFTMS, r.TotalMS)
	}
	fmt.Fprintf(e.Stdout, "  min main reuse (2nd on) %.3f", s.MinMainReuse)
	if s.MainOnlyReuse != nil {
		fmt.Fprintf(e.Stdout, "; without side requests %v: max delta %.3f", fmtRatios(s.MainOnlyReuse), s.SideEffectDelta)
	}
	fmt.Fprintln(e.Stdout)
}

func fmtRatios(r []float64) string {
	s := make([]string, len(r))
	for i, x := range r {
		s[i] = strconv.FormatFloat(x, 'f', 3, 64)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// recordedRequest is one file of a recorded session.
type recordedRequest struct {
	N       int             `json:"n"`
	Method  string          `json:"method"`
	Path    string          `json:"path"`
	Headers [][2]string     `json:"headers"`
	Body    json.RawMessage `json:"body"`
	side    bool
}

type recordedSession struct {
	name string
	reqs []recordedRequest
}

// loadRecorded reads every session folder under dir (or dir itself when it
// holds N.json files), keeping only the folder named only when set.
func loadRecorded(dir, only string) ([]recordedSession, error) {
	folders := []string{dir}
	if m, _ := filepath.Glob(filepath.Join(dir, "1.json")); len(m) == 0 {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		folders = nil
		for _, en := range entries {
			if en.IsDir() && (only == "" || en.Name() == only) {
				folders = append(folders, filepath.Join(dir, en.Name()))
			}
		}
	}
	var out []recordedSession
	for _, f := range folders {
		files, _ := filepath.Glob(filepath.Join(f, "*.json"))
		rs := recordedSession{name: filepath.Base(f)}
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			var r recordedRequest
			if err := json.Unmarshal(b, &r); err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			if r.N == 0 {
				r.N, _ = strconv.Atoi(strings.TrimSuffix(filepath.Base(p), ".json"))
			}
			rs.reqs = append(rs.reqs, r)
		}
		sort.Slice(rs.reqs, func(i, j int) bool { return rs.reqs[i].N < rs.reqs[j].N })
		if len(rs.reqs) > 0 {
			markSides(rs.reqs)
			out = append(out, rs)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no recorded sessions (N.json files) in %s", dir)
	}
	return out, nil
}

// markSides marks the requests outside the main conversation: the main one
// is the (session header, system prompt) pair sent most often, ties going
// to the longer system prompt.
func markSides(reqs []recordedRequest) {
	type key struct{ session, system string }
	keyOf := func(r recordedRequest) (key, int) {
		var body struct {
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		json.Unmarshal(r.Body, &body)
		var sys []byte
		for _, m := range body.Messages {
			if m.Role == "system" {
				sys = m.Content
				break
			}
		}
		h := sha256.Sum256(sys)
		return key{header(r.Headers, "x-session-id"), string(h[:])}, len(sys)
	}
	count, size := map[key]int{}, map[key]int{}
	keys := make([]key, len(reqs))
	for i, r := range reqs {
		k, n := keyOf(r)
		keys[i] = k
		count[k]++
		size[k] = n
	}
	var main key
	best := -1
	for _, k := range keys {
		if c := count[k]*1<<32 + size[k]; c > best {
			main, best = k, c
		}
	}
	for i := range reqs {
		reqs[i].side = keys[i] != main
	}
}

// recordedModel is the model field of a session's first request.
func recordedModel(rs recordedSession) string {
	var body struct {
		Model string `json:"model"`
	}
	json.Unmarshal(rs.reqs[0].Body, &body)
	return body.Model
}

func header(h [][2]string, name string) string {
	for _, kv := range h {
		if strings.EqualFold(kv[0], name) {
			return kv[1]
		}
	}
	return ""
}

// replayHTTP sends a session's requests in order, each with its recorded
// headers and body (max_tokens lowered to maxTokens).
func replayHTTP(ctx context.Context, e *cli.Env, base string, rs recordedSession, maxTokens int, mainOnly bool) (httpReplaySession, error) {
	res := httpReplaySession{Name: rs.name, MinMainReuse: 1}
	bar := e.NewProgress("bench http "+rs.name, int64(len(rs.reqs)), "requests")
	defer bar.Clear()
	for _, r := range rs.reqs {
		bar.Add(1)
		if mainOnly && r.side {
			continue
		}
		var body map[string]any
		if err := json.Unmarshal(r.Body, &body); err != nil {
			return res, fmt.Errorf("request %d: %w", r.N, err)
		}
		if _, ok := body["max_completion_tokens"]; ok {
			body["max_completion_tokens"] = maxTokens
		} else {
			body["max_tokens"] = maxTokens
		}
		b, _ := json.Marshal(body)
		path := r.Path
		if path == "" {
			path = "/v1/chat/completions"
		}
		req, err := http.NewRequestWithContext(ctx, "POST", base+path, bytes.NewReader(b))
		if err != nil {
			return res, err
		}
		for _, kv := range r.Headers {
			switch strings.ToLower(kv[0]) {
			case "host", "content-length", "connection", "accept-encoding":
				continue
			}
			req.Header.Set(kv[0], kv[1])
		}
		out, err := sendTimed(req)
		if err != nil {
			return res, fmt.Errorf("request %d: %w", r.N, err)
		}
		out.N = r.N
		res.Requests = append(res.Requests, out)
	}
	groupBySession(&res)
	return res, nil
}

// groupBySession groups the requests as ctxd's session mapping did (the
// X-Ctxd-Session header of each response): the main conversation is the
// ctxd session that served the most requests (ties: the longer prompts),
// the rest are side requests; each request's reuse is measured against
// the previous request its ctxd session served.
func groupBySession(res *httpReplaySession) {
	count, size := map[string]int{}, map[string]int{}
	for _, r := range res.Requests {
		count[r.Session]++
		size[r.Session] += r.PromptTokens
	}
	main, best := "", -1
	for _, r := range res.Requests {
		if c := count[r.Session]<<32 + size[r.Session]; c > best {
			main, best = r.Session, c
		}
	}
	prev := map[string]int{}
	res.Sides = 0
	for i := range res.Requests {
		r := &res.Requests[i]
		r.Side = r.Session != main
		if r.Side {
			res.Sides++
		}
		if p := prev[r.Session]; p > 0 {
			r.ReuseOfPrevious = float64(r.CachedTokens+r.ApproxTokens) / float64(p)
			if !r.Side {
				res.MinMainReuse = min(res.MinMainReuse, r.ReuseOfPrevious)
			}
		}
		prev[r.Session] = r.PromptTokens
	}
}

// sendTimed sends req and reads the usage of a plain or streamed (SSE)
// chat completion, timing the first byte of the body.
func sendTimed(req *http.Request) (httpReplayRequest, error) {
	var out httpReplayRequest
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	out.Session = resp.Header.Get("X-Ctxd-Session")
	br := bufio.NewReaderSize(resp.Body, 1<<16)
	if _, err := br.Peek(1); err != nil {
		return out, fmt.Errorf("empty response (HTTP %d): %w", resp.StatusCode, err)
	}
	out.TTFBMS = ms64(time.Since(start))
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	var all bytes.Buffer
	for {
		line, err := br.ReadBytes('\n')
		all.Write(line)
		if sse && out.TTFTMS == 0 && firstToken(line) {
			out.TTFTMS = ms64(time.Since(start))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return out, err
		}
	}
	out.TotalMS = ms64(time.Since(start))
	if out.TTFTMS == 0 {
		out.TTFTMS = out.TotalMS
	}
	if resp.StatusCode != 200 {
		return out, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(all.Bytes()))
	}
	type usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
			Approx       int `json:"approximate_cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	type timings struct {
		PromptN int `json:"prompt_n"`
	}
	var found bool
	take := func(b []byte) {
		var v struct {
			Usage   *usage   `json:"usage"`
			Timings *timings `json:"timings"`
			Error   any      `json:"error"`
		}
		if json.Unmarshal(b, &v) != nil || v.Usage == nil {
			return
		}
		found = true
		out.PromptTokens, out.CachedTokens, out.ApproxTokens = v.Usage.PromptTokens, v.Usage.PromptTokensDetails.CachedTokens, v.Usage.PromptTokensDetails.Approx
		if v.Timings != nil {
			out.PrefilledTokens = v.Timings.PromptN
		}
	}
	if sse {
		for _, line := range strings.Split(all.String(), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok && d != "[DONE]" {
				if strings.Contains(d, `"error"`) {
					return out, errors.New(d)
				}
				take([]byte(d))
			}
		}
	} else {
		take(all.Bytes())
	}
	if !found {
		return out, errors.New("no usage in the response (stream_options.include_usage?)")
	}
	return out, nil
}

// firstToken reports whether an SSE line carries generated text or a tool
// call (not a role-only or keep-alive chunk).
func firstToken(line []byte) bool {
	d, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data: "))
	if !ok || string(d) == "[DONE]" {
		return false
	}
	var v struct {
		Choices []struct {
			Delta struct {
				Content   string `json:"content"`
				Reasoning string `json:"reasoning_content"`
				ToolCalls []any  `json:"tool_calls"`
			} `json:"delta"`
			Text string `json:"text"`
		} `json:"choices"`
	}
	if json.Unmarshal(d, &v) != nil {
		return false
	}
	for _, c := range v.Choices {
		if c.Delta.Content != "" || c.Delta.Reasoning != "" || len(c.Delta.ToolCalls) > 0 || c.Text != "" {
			return true
		}
	}
	return false
}

// httpDaemon is a private daemon with the HTTP door on a loopback port.
type httpDaemon struct {
	p    *sidecar.Private
	base string
	stop func()
}

func startHTTPDaemon(model, name string, cfg sidecar.Config) (*httpDaemon, error) {
	cfg.ModelPath, cfg.Version, cfg.Engine = model, "ctxbench-private", llama.Backend{}
	p, err := sidecar.StartPrivate(cfg)
	if err != nil {
		return nil, err
	}
	door := httpapi.New(p.Server, httpapi.Config{Addr: "127.0.0.1:0", ModelName: name, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ln, err := door.Listen()
	if err != nil {
		p.Stop()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); door.Serve(ctx, ln) }()
	return &httpDaemon{p: p, base: "http://" + ln.Addr().String(), stop: func() { cancel(); <-done; p.Stop() }}, nil
}

// benchHTTPOverhead runs the same completion turn (a fully reused prompt,
// greedy tokens) over the Unix socket with the Go client and over HTTP
// (/v1/completions, streamed), interleaved, on one dense daemon.
func benchHTTPOverhead(ctx context.Context, model string, reps int) (*httpOverhead, error) {
	d, err := startHTTPDaemon(model, "", sidecar.Config{ContextTokens: 2048, NoCold: true})
	if err != nil {
		return nil, err
	}
	defer d.stop()
	tmpl, err := chat.NewTemplate(chat.ModelInfo{}) // raw prompts: no chat formatting
	if err != nil {
		return nil, err
	}
	prompt := "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends."
	m, err := tmpl.RenderPrompt("", prompt, true)
	if err != nil {
		return nil, err
	}
	m.Template = "" // rendered already: the door sends it to the daemon as plain text too
	c, err := client.Dial(ctx, d.p.Socket)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	s, err := c.OpenSession(ctx, "bench-socket")
	if err != nil {
		return nil, err
	}
	stops := tmpl.StopStrings()
	socketTurn := func(n int) (time.Duration, int, int, error) {
		t0 := time.Now()
		if _, err := s.EnsurePrefix(ctx, clientconv.Manifest(m)); err != nil {
			return 0, 0, 0, err
		}
		p, err := s.PrefillSuffix(ctx)
		if err != nil {
			return 0, 0, 0, err
		}
		r, err := s.Decode(ctx, client.DecodeOptions{MaxTokens: n, Stop: stops}, func(client.Token) error { return nil })
		return time.Since(t0), r.Tokens, int(p.PromptTokens), err
	}
	httpTurn := func(n int) (time.Duration, int, error) {
		body := fmt.Sprintf(`{"prompt": %q, "max_tokens": %d, "stream": true, "stream_options": {"include_usage": true}}`, prompt, n)
		req, _ := http.NewRequestWithContext(ctx, "POST", d.base+"/v1/completions", strings.NewReader(body))
		req.Header.Set("X-Session-Id", "bench-http")
		t0 := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, 0, err
		}
		all, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		el := time.Since(t0)
		if err != nil || resp.StatusCode != 200 {
			return 0, 0, fmt.Errorf("HTTP %d %v: %s", resp.StatusCode, err, all)
		}
		i := bytes.LastIndex(all, []byte(`"completion_tokens":`))
		if i < 0 {
			return 0, 0, errors.New("no usage")
		}
		tok, _ := strconv.Atoi(string(bytes.TrimRight(bytes.SplitN(all[i+len(`"completion_tokens":`):], []byte(","), 2)[0], "}")))
		return el, tok, nil
	}
	const long = 65
	o := &httpOverhead{Reps: reps, Tokens: long}
	var s1, sN, h1, hN []float64
	// Blocks of turns per path, so sessions do not swap on every turn (a
	// swap parks one session's KV and brings the other's back); the first
	// turn of each block, which pays the swap, is not counted.
	const block = 4
	for len(s1) < reps {
		for k := 0; k <= block; k++ {
			a, _, pt, err := socketTurn(1)
			if err != nil {
				return nil, err
			}
			cN, nS, _, err := socketTurn(long)
			if err != nil {
				return nil, err
			}
			if nS != long {
				return nil, fmt.Errorf("a decode ended early (%d of %d tokens): pick another prompt", nS, long)
			}
			o.PromptTokens = pt
			if k > 0 {
				s1, sN = append(s1, ms64(a)), append(sN, ms64(cN))
			}
		}
		for k := 0; k <= block; k++ {
			b, _, err := httpTurn(1)
			if err != nil {
				return nil, err
			}
			dN, nH, err := httpTurn(long)
			if err != nil {
				return nil, err
			}
			if nH != long {
				return nil, fmt.Errorf("a decode ended early (%d of %d tokens): pick another prompt", nH, long)
			}
			if k > 0 {
				h1, hN = append(h1, ms64(b)), append(hN, ms64(dN))
			}
		}
	}
	o.Reps = len(s1)
	o.SocketTurnMS, o.HTTPTurnMS = median(s1), median(h1)
	o.TurnOverheadMS = o.HTTPTurnMS - o.SocketTurnMS
	o.SocketPerTokUS = (median(sN) - o.SocketTurnMS) * 1000 / (long - 1)
	o.HTTPPerTokUS = (median(hN) - o.HTTPTurnMS) * 1000 / (long - 1)
	o.TokenOverheadUS = o.HTTPPerTokUS - o.SocketPerTokUS
	return o, nil
}

func ms64(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
