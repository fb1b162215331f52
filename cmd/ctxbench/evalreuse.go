package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/internal/chat"
	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/internal/clientconv"
	"github.com/ctxd/ctxd/internal/logitstat"
	"github.com/ctxd/ctxd/sidecar"
)

// eval reuse: segment reuse past an early change, against exact prefill
// on the same request. Each case is a request ("prev") and the same
// request after an early change ("changed": a perturbation of a recorded
// agent request's system prompt or tools, or an edit of a trace's first
// user message). On one dense session: prev is prefilled; changed is
// synchronised exactly (timed) and decoded greedily; prev again; changed
// with segment reuse (timed) and decoded teacher-forced on the exact
// run's tokens; changed again and decoded greedily. Reported: next-token
// KL(exact ‖ approximate) and top-1 agreement over the decoded tokens,
// greedy agreement, both prefill times, and what was reused how. A needle
// check (needle.gguf) puts a needle inside a segment reused after the
// change and compares recall with exact prefill.

type reuseCase struct {
	Source       string `json:"source"`
	Perturbation string `json:"perturbation"`
	PromptTokens int    `json:"prompt_tokens"`
	ExactReused  int    `json:"exact_reused"` // tokens before the first change (exact path)
	Approximate  int    `json:"approximate"`  // moved KV (segment reuse)
	Recomputed   int    `json:"recomputed"`
	Budget       int    `json:"recompute_budget"`
	New          int    `json:"new"` // prefilled with reuse, less recomputed
	// BoundHolds: the recomputed tokens stay within the budget (+1 for
	// the logits token) and nothing else was prefilled but new tokens.
	BoundHolds   bool    `json:"bound_holds"`
	ExactMS      float64 `json:"exact_ms"`
	ApproxMS     float64 `json:"approx_ms"`
	Speedup      float64 `json:"speedup"`
	Tokens       int     `json:"tokens"`
	KLMean       float64 `json:"kl_mean"`
	KLMax        float64 `json:"kl_max"`
	Top1         float64 `json:"top1"`
	GreedyPrefix int     `json:"greedy_common_prefix"`
	GreedyMatch  float64 `json:"greedy_match"`
	Choice       string  `json:"choice"`
}

type needleReuse struct {
	Model     string  `json:"model"`
	Trials    int     `json:"trials"`
	Moved     int     `json:"moved_tokens_per_trial"`
	ExactAcc  float64 `json:"exact_acc"`
	ApproxAcc float64 `json:"approx_acc"`
}

type reuseResult struct {
	Model        string       `json:"model"`
	ReuseLatency string       `json:"reuse_latency"`
	Cases        []reuseCase  `json:"cases"`
	Needle       *needleReuse `json:"needle,omitempty"`
	Summary      reuseSummary `json:"summary"`
	Seconds      float64      `json:"seconds"`
}

type reuseSummary struct {
	KLMean      float64 `json:"kl_mean"`
	KLMax       float64 `json:"kl_max"`
	Top1Min     float64 `json:"top1_min"`
	Top1Mean    float64 `json:"top1_mean"`
	GreedyMean  float64 `json:"greedy_match_mean"`
	SpeedupMean float64 `json:"speedup_mean"`
}

func evalReuse(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("eval reuse", flag.ContinueOnError)
	model := fs.String("model", defaultModel(), "model")
	dir := fs.String("requests", envOr("CTXD_AGENT_REQUESTS", "../shared/agent-requests"), "recorded agent sessions")
	sessions := fs.String("sessions", "opencode,qwen", "recorded sessions to perturb (their last main request), comma-separated; empty: none")
	perts := fs.String("perturb", "date,agents,tools,gitstatus", "perturbations of each request: date, agents (an AGENTS.md block added), tools (the last tool removed), gitstatus")
	traces := fs.String("traces", "", "SWE-agent .traj files whose first user message is edited (comma-separated)")
	traceTokens := fs.Int("trace-messages", 8, "messages of each trace to use")
	maxChars := fs.Int("max-message-chars", 0, "cut every message to this many characters (0: whole; for slow models)")
	n := fs.Int("tokens", 64, "decoded tokens compared")
	latency := fs.Duration("reuse-latency", time.Nanosecond, "the daemon's --reuse-latency: its recompute budget is what this leaves after the new tokens (1ns: none)")
	needleModel := fs.String("needle-model", envOr("CTXD_NEEDLE_MODEL", "../shared/models/needle.gguf"), "model for the needle check (empty: skip)")
	needleTrials := fs.Int("needle-trials", 20, "needle placements")
	threads := fs.Int("threads", 0, "llama.cpp threads (0: all CPUs)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	if *n < 1 {
		return cli.Usage(fmt.Errorf("--tokens must be positive"))
	}
	start := time.Now()
	res := reuseResult{Model: *model, ReuseLatency: latency.String()}
	cases, err := reuseCases(*model, *dir, *sessions, *perts, *traces, *traceTokens, *maxChars)
	if err != nil {
		return err
	}
	if len(cases) > 0 {
		longest := 0
		for _, c := range cases {
			longest = max(longest, c.tokens)
		}
		cfg := sidecar.Config{ModelPath: *model, ContextTokens: longest*5/4 + *n + 256, HotTokens: 0, NoCold: true,
			Threads: *threads, ReuseLatency: *latency, TurnLatency: -1, Version: "ctxbench-private"}
		c, done, err := privateClient(ctx, cfg)
		if err != nil {
			return err
		}
		bar := e.NewProgress("eval reuse", int64(len(cases)), "cases")
		for _, rc := range cases {
			out, err := runReuseCase(ctx, c, rc, *n)
			bar.Add(1)
			if err != nil {
				done()
				bar.Clear()
				return fmt.Errorf("%s %s: %w", rc.source, rc.pert, err)
			}
			res.Cases = append(res.Cases, out)
			if b, err := json.Marshal(out); err == nil {
				fmt.Fprintf(e.Stderr, "case %s\n", b) // as it lands: a long run keeps what it measured
			}
		}
		bar.Clear()
		done()
	}
	if *needleModel != "" && *needleTrials > 0 {
		nr, err := needleReuseCheck(ctx, *needleModel, *needleTrials, *latency, *threads)
		if err != nil {
			return fmt.Errorf("needle: %w", err)
		}
		res.Needle = nr
	}
	res.Summary = summarize(res.Cases)
	res.Seconds = time.Since(start).Seconds()
	if *asJSON {
		return e.PrintJSON(res)
	}
	printReuse(e, res)
	return nil
}

func summarize(cs []reuseCase) reuseSummary {
	s := reuseSummary{Top1Min: 1}
	if len(cs) == 0 {
		return s
	}
	for _, c := range cs {
		s.KLMean += c.KLMean / float64(len(cs))
		s.KLMax = max(s.KLMax, c.KLMax)
		s.Top1Min = min(s.Top1Min, c.Top1)
		s.Top1Mean += c.Top1 / float64(len(cs))
		s.GreedyMean += c.GreedyMatch / float64(len(cs))
		s.SpeedupMean += c.Speedup / float64(len(cs))
	}
	return s
}

func printReuse(e *cli.Env, r reuseResult) {
	fmt.Fprintf(e.Stdout, "eval reuse: %s, reuse-latency %s\n", r.Model, r.ReuseLatency)
	fmt.Fprintf(e.Stdout, "  %-26s %-9s %7s %7s %7s %6s %6s %6s %9s %9s %6s %8s %8s %5s %6s %5s\n", "source", "change", "prompt", "exact", "approx", "recomp", "budget", "new", "exact_ms", "reuse_ms", "speed", "KL_mean", "KL_max", "top1", "greedy", "bound")
	for _, c := range r.Cases {
		fmt.Fprintf(e.Stdout, "  %-26s %-9s %7d %7d %7d %6d %6d %6d %9.0f %9.0f %5.1fx %8.4f %8.4f %5.3f %6.3f %5v\n", c.Source, c.Perturbation, c.PromptTokens, c.ExactReused, c.Approximate,
			c.Recomputed, c.Budget, c.New, c.ExactMS, c.ApproxMS, c.Speedup, c.KLMean, c.KLMax, c.Top1, c.GreedyMatch, c.BoundHolds)
	}
	s := r.Summary
	fmt.Fprintf(e.Stdout, "  summary: KL mean %.4f (max %.4f), top-1 mean %.3f (min %.3f), greedy match %.3f, speedup %.1fx\n", s.KLMean, s.KLMax, s.Top1Mean, s.Top1Min, s.GreedyMean, s.SpeedupMean)
	if nr := r.Needle; nr != nil {
		fmt.Fprintf(e.Stdout, "  needle (%s, %d trials, %d tokens moved each): exact prefill %.3f, segment reuse %.3f\n", filepath.Base(nr.Model), nr.Trials, nr.Moved, nr.ExactAcc, nr.ApproxAcc)
	}
	fmt.Fprintf(e.Stdout, "  %.0f s\n", r.Seconds)
}

// reusePair is one case: the request before and after the change.
type reusePair struct {
	source, pert  string
	prev, changed client.Manifest
	tokens        int // estimated prompt tokens (for the context size)
}

func reuseCases(model, dir, sessions, perts, traces string, traceMsgs, maxChars int) ([]reusePair, error) {
	tmpl, err := chat.NewTemplate(chat.ModelInfo{}) // stories260K and the synthetic models have no chat template: the fallback
	if err != nil {
		return nil, err
	}
	render := func(msgs []chat.Message, tools []chat.Tool) (client.Manifest, int, error) {
		m, err := tmpl.Render(msgs, tools)
		if err != nil {
			return client.Manifest{}, 0, err
		}
		m.Template = "chat:" + tmpl.Name()
		chars := 0
		for _, s := range m.Segments {
			chars += len(s.Text)
		}
		return clientconv.Manifest(m), chars, nil
	}
	var out []reusePair
	add := func(source, pert string, a, b []chat.Message, ta, tb []chat.Tool) error {
		a, b = cutMessages(a, maxChars), cutMessages(b, maxChars)
		pm, ca, err := render(a, ta)
		if err != nil {
			return err
		}
		cm, cb, err := render(b, tb)
		if err != nil {
			return err
		}
		out = append(out, reusePair{source: source, pert: pert, prev: pm, changed: cm, tokens: max(ca, cb)}) // ≤ 1 token per byte
		return nil
	}
	if sessions != "" {
		for _, name := range strings.Split(sessions, ",") {
			rss, err := loadRecorded(filepath.Join(dir, name), "")
			if err != nil {
				return nil, err
			}
			rs := rss[0]
			var last recordedRequest
			for _, r := range rs.reqs {
				if !r.side {
					last = r
				}
			}
			msgs, tools, err := recordedChat(last.Body)
			if err != nil {
				return nil, fmt.Errorf("%s request %d: %w", name, last.N, err)
			}
			msgs = cutMessages(msgs, maxChars) // before the change, so the change survives the cut
			for _, p := range strings.Split(perts, ",") {
				m2, t2, ok := perturb(p, msgs, tools)
				if !ok {
					continue
				}
				if err := add(fmt.Sprintf("%s/%d", name, last.N), p, msgs, m2, tools, t2); err != nil {
					return nil, err
				}
			}
		}
	}
	if traces != "" {
		for _, path := range strings.Split(traces, ",") {
			msgs, err := traceMessages(path, traceMsgs)
			if err != nil {
				return nil, err
			}
			m2 := append([]chat.Message(nil), msgs...)
			for i := range m2 {
				if m2[i].Role == chat.RoleUser {
					m2[i].Content = "(The task statement was edited: read it again.)\n" + m2[i].Content
					break
				}
			}
			if err := add(filepath.Base(path), "edit", msgs, m2, nil, nil); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// cutMessages cuts every message's content to n bytes (0: whole), keeping
// valid UTF-8.
func cutMessages(msgs []chat.Message, n int) []chat.Message {
	if n <= 0 {
		return msgs
	}
	out := append([]chat.Message(nil), msgs...)
	for i := range out {
		if c := out[i].Content; len(c) > n {
			out[i].Content = strings.ToValidUTF8(c[:n], "")
		}
	}
	return out
}

// recordedChat reads an OpenAI chat request body's messages and tools.
func recordedChat(body json.RawMessage) ([]chat.Message, []chat.Tool, error) {
	var req struct {
		Messages []struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			ToolCallID string          `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
		Tools []struct {
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, nil, err
	}
	var msgs []chat.Message
	for _, m := range req.Messages {
		cm := chat.Message{Role: m.Role, Content: contentString(m.Content), ToolCallID: m.ToolCallID}
		if cm.Role == "developer" {
			cm.Role = chat.RoleSystem
		}
		for _, tc := range m.ToolCalls {
			args := string(tc.Function.Arguments)
			var s string
			if json.Unmarshal(tc.Function.Arguments, &s) == nil {
				args = s
			}
			cm.ToolCalls = append(cm.ToolCalls, chat.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: args})
		}
		msgs = append(msgs, cm)
	}
	var tools []chat.Tool
	for _, t := range req.Tools {
		tools = append(tools, chat.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	return msgs, tools, nil
}

func contentString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

var dateRe = regexp.MustCompile(`(Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{2} \d{4}`)

const agentsBlock = `

Instructions from: /repo/AGENTS.md
# Repository guidelines
- Run the tests with "python -m pytest -q" before you report a change as done.
- Keep functions small; name things for what they mean, not how they work.
- Never commit generated files; the build writes them under build/.
- Public functions carry a docstring that says what they return and when they fail.
- Use the standard library where it suffices; ask before adding a dependency.
`

// perturb applies an early change to a request: false when it does not
// apply (no tools to change).
func perturb(kind string, msgs []chat.Message, tools []chat.Tool) ([]chat.Message, []chat.Tool, bool) {
	m := append([]chat.Message(nil), msgs...)
	si := -1
	for i := range m {
		if m[i].Role == chat.RoleSystem {
			si = i
			break
		}
	}
	if si < 0 && kind != "tools" {
		return nil, nil, false
	}
	switch kind {
	case "date":
		if loc := dateRe.FindStringIndex(m[si].Content); loc != nil {
			m[si].Content = m[si].Content[:loc[0]] + "Wed Dec 02 2026" + m[si].Content[loc[1]:]
		} else {
			m[si].Content = "Today's date: 2026-12-02.\n" + m[si].Content
		}
	case "agents":
		c := m[si].Content
		at := len(c) * 3 / 4
		if i := strings.LastIndex(c[:at], "\n"); i > 0 {
			at = i
		}
		m[si].Content = c[:at] + agentsBlock + c[at:]
	case "gitstatus":
		m[si].Content += "\n\ngitStatus: This is the git status at the start of the conversation.\nCurrent branch: main\nStatus:\nM main.py\n?? notes.txt\n"
	case "tools":
		if len(tools) < 2 {
			return nil, nil, false
		}
		return m, tools[:len(tools)-1], true
	default:
		return nil, nil, false
	}
	return m, tools, true
}

// traceMessages are the first n messages of a SWE-agent trajectory.
func traceMessages(path string, n int) ([]chat.Message, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var traj struct {
		History []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"history"`
	}
	if err := json.Unmarshal(b, &traj); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []chat.Message
	for _, h := range traj.History {
		role := h.Role
		if role == chat.RoleTool {
			role = chat.RoleUser // SWE-agent's tool messages carry no call ids
		}
		out = append(out, chat.Message{Role: role, Content: contentString(h.Content)})
		if len(out) == n {
			break
		}
	}
	// The conversation ends with a user turn: the next call's prompt.
	for len(out) > 1 && out[len(out)-1].Role == chat.RoleAssistant {
		out = out[:len(out)-1]
	}
	return out, nil
}

// syncTurn runs EnsurePrefix and PrefillSuffix and returns their totals.
func syncTurn(ctx context.Context, s *client.Session, m client.Manifest) (client.PrefixResult, error) {
	a, err := s.EnsurePrefix(ctx, m)
	if err != nil {
		return a, err
	}
	b, err := s.PrefillSuffix(ctx)
	if err != nil {
		return b, err
	}
	return client.PrefixResult{PromptTokens: b.PromptTokens, ReusedTokens: a.ReusedTokens + b.ReusedTokens, PrefilledTokens: a.PrefilledTokens + b.PrefilledTokens,
		ApproximateTokens: a.ApproximateTokens + b.ApproximateTokens, RecomputedTokens: a.RecomputedTokens + b.RecomputedTokens,
		Elapsed: a.Elapsed + b.Elapsed, ReuseChoice: strings.TrimSpace(a.ReuseChoice + " " + b.ReuseChoice),
		RecomputeBudget: a.RecomputeBudget + b.RecomputeBudget}, nil
}

// decodeLogits decodes n tokens (greedy, or teacher-forced on forced) and
// returns the tokens fed, what the model predicted and each step's logits.
func decodeLogits(ctx context.Context, s *client.Session, n int, forced []int32) (toks, pred []int32, logits [][]float32, err error) {
	o := client.DecodeOptions{MaxTokens: n, ReturnLogits: true, Forced: forced}
	if forced != nil {
		o.MaxTokens = len(forced)
	}
	_, err = s.Decode(ctx, o, func(t client.Token) error {
		toks, pred = append(toks, t.ID), append(pred, t.Predicted)
		logits = append(logits, t.Logits)
		return nil
	})
	return toks, pred, logits, err
}

func runReuseCase(ctx context.Context, c *client.Client, rc reusePair, n int) (reuseCase, error) {
	out := reuseCase{Source: rc.source, Perturbation: rc.pert}
	s, err := c.OpenSession(ctx, "eval-reuse")
	if err != nil {
		return out, err
	}
	defer s.Close(context.WithoutCancel(ctx))
	exact := client.WithExactReuse(ctx)
	if _, err := syncTurn(exact, s, rc.prev); err != nil {
		return out, err
	}
	ex, err := syncTurn(exact, s, rc.changed)
	if err != nil {
		return out, err
	}
	exToks, _, exLogits, err := decodeLogits(ctx, s, n, nil)
	if err != nil || len(exToks) == 0 {
		return out, fmt.Errorf("exact decode: %d tokens, %v", len(exToks), err)
	}
	if _, err := syncTurn(exact, s, rc.prev); err != nil {
		return out, err
	}
	ap, err := syncTurn(ctx, s, rc.changed)
	if err != nil {
		return out, err
	}
	_, _, apLogits, err := decodeLogits(ctx, s, 0, exToks)
	if err != nil {
		return out, fmt.Errorf("teacher-forced decode: %w", err)
	}
	if _, err := syncTurn(ctx, s, rc.changed); err != nil {
		return out, err
	}
	greedy, _, _, err := decodeLogits(ctx, s, len(exToks), nil)
	if err != nil {
		return out, err
	}
	out.PromptTokens, out.ExactReused = ap.PromptTokens, ex.ReusedTokens
	out.Approximate, out.Recomputed = ap.ApproximateTokens, ap.RecomputedTokens
	out.New = ap.PrefilledTokens - ap.RecomputedTokens
	out.Budget = ap.RecomputeBudget
	out.BoundHolds = ap.RecomputedTokens <= ap.RecomputeBudget+1 && ap.PrefilledTokens+ap.ReusedTokens == ap.PromptTokens
	out.ExactMS, out.ApproxMS = ms64(ex.Elapsed), ms64(ap.Elapsed)
	if out.ApproxMS > 0 {
		out.Speedup = out.ExactMS / out.ApproxMS
	}
	out.Choice = ap.ReuseChoice
	out.Tokens = len(exToks)
	agree := 0
	for i := range exToks {
		p, q := logitstat.Softmax(exLogits[i]), logitstat.Softmax(apLogits[i])
		d := logitstat.KL(p, q)
		out.KLMean += d / float64(len(exToks))
		out.KLMax = max(out.KLMax, d)
		if argmax(exLogits[i]) == argmax(apLogits[i]) {
			agree++
		}
	}
	out.Top1 = float64(agree) / float64(len(exToks))
	match := 0
	out.GreedyPrefix = len(exToks)
	for i := range exToks {
		if i < len(greedy) && greedy[i] == exToks[i] {
			match++
		} else if out.GreedyPrefix == len(exToks) {
			out.GreedyPrefix = i
		}
	}
	out.GreedyMatch = float64(match) / float64(len(exToks))
	return out, nil
}

func argmax(l []float32) int {
	best := 0
	for i, x := range l {
		if x > l[best] {
			best = i
		}
	}
	return best
}

// needleReuseCheck: [BOS][A: 40 filler][B: 60 filler, a 24-token needle,
// 60 filler] is prefilled; then A changes (8 tokens inserted) and the
// needle's first 4 tokens ask for the rest. With exact prefill and with
// B's KV moved (segment reuse), the 20 answer tokens are scored top-1,
// teacher-forced.
func needleReuseCheck(ctx context.Context, model string, trials int, latency time.Duration, threads int) (*needleReuse, error) {
	cfg := sidecar.Config{ModelPath: model, ContextTokens: 512, HotTokens: 0, NoCold: true, Threads: threads, ReuseLatency: latency, TurnLatency: -1, Version: "ctxbench-private"}
	c, done, err := privateClient(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer done()
	rng := rand.New(rand.NewSource(7))
	ids := func(k int) []int32 {
		out := make([]int32, k)
		for i := range out {
			out[i] = int32(3 + rng.Intn(509))
		}
		return out
	}
	seg := func(id string, toks []int32, stable bool) client.Segment {
		return client.Segment{ID: id, Kind: client.KindRepoMap, Tokens: toks, Stable: stable}
	}
	r := &needleReuse{Model: model, Trials: trials}
	var exHits, apHits, asked int
	for t := 0; t < trials; t++ {
		a := ids(40)
		needle := ids(24)
		b := append(append(ids(60), needle...), ids(60)...)
		a2 := append(append(append([]int32(nil), a[:20]...), ids(8)...), a[20:]...)
		prev := client.Manifest{Template: "plain", Segments: []client.Segment{seg("a", a, true), seg("b", b, true)}}
		changed := client.Manifest{Template: "plain", Segments: []client.Segment{seg("a", a2, true), seg("b", b, true), seg("q", needle[:4], false)}}
		s, err := c.OpenSession(ctx, fmt.Sprintf("needle-%d", t))
		if err != nil {
			return nil, err
		}
		exact := client.WithExactReuse(ctx)
		score := func(cx context.Context) (int, int, error) {
			res, err := syncTurn(cx, s, changed)
			if err != nil {
				return 0, 0, err
			}
			_, pred, _, err := decodeLogits(ctx, s, 0, needle[4:])
			hits := 0
			for i, p := range pred {
				if p == needle[4+i] {
					hits++
				}
			}
			return hits, res.ApproximateTokens, err
		}
		if _, err := syncTurn(exact, s, prev); err != nil {
			return nil, err
		}
		eh, _, err := score(exact)
		if err != nil {
			return nil, err
		}
		if _, err := syncTurn(exact, s, prev); err != nil {
			return nil, err
		}
		ah, moved, err := score(ctx)
		if err != nil {
			return nil, err
		}
		s.Close(ctx)
		exHits += eh
		apHits += ah
		asked += len(needle) - 4
		r.Moved = moved
	}
	r.ExactAcc = float64(exHits) / float64(asked)
	r.ApproxAcc = float64(apHits) / float64(asked)
	return r, nil
}
