package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/internal/chat"
	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/internal/clientconv"
	"github.com/ctxd/ctxd/sidecar"
)

// eval bound: issue 20's must-hold, per request. The recorded agent
// sessions are replayed in order over the socket (each request rendered
// as the HTTP door renders it, sent to a session of its own per agent
// session id and system prompt, as the door's session choice does), then
// perturbations of each session's last main request (a date, an AGENTS.md
// block, a memory file, the tools array, git status in the system
// prompt; each followed by the original request again) and a synthetic
// sub-agent (its own session, its own system prompt, the same tools);
// optionally (closed) the session closes and a new one sends the request
// with its date changed, what a hot set's orphan tape then lends counted
// as held.
// Per request: prompt tokens; new tokens, a reference computed by the
// bench: the tokens past the exact reuse that lie in no segment whose text
// a live session held; prefilled; the recompute budget; exact,
// approximate and recomputed tokens; PASS when prefilled <= new + budget
// + 1 (the last token, decoded for its logits).

type boundRow struct {
	Source     string  `json:"source"`
	Session    string  `json:"session"`
	Prompt     int     `json:"prompt_tokens"`
	New        int     `json:"new_tokens"`
	Prefilled  int     `json:"prefilled"`
	Budget     int     `json:"recompute_budget"`
	Exact      int     `json:"exact"`
	Approx     int     `json:"approximate"`
	Recomputed int     `json:"recomputed"`
	Pass       bool    `json:"pass"`
	MS         float64 `json:"ms"`
	Choice     string  `json:"choice,omitempty"`
	// Detail lists, for a failed request, each segment: id, first
	// position, tokens, and whether a live session held its text.
	Detail string `json:"detail,omitempty"`
}

type boundResult struct {
	Model        string     `json:"model"`
	ReuseLatency string     `json:"reuse_latency"`
	Layout       string     `json:"layout"`
	Rows         []boundRow `json:"rows"`
	Failed       int        `json:"failed"`
	Seconds      float64    `json:"seconds"`
}

// boundSession is one bench session: a daemon session and the segment
// texts of the last prompt it was synchronised to.
type boundSession struct {
	name string
	s    *client.Session
	segs []string
}

func evalBound(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("eval bound", flag.ContinueOnError)
	model := fs.String("model", defaultModel(), "model")
	dir := fs.String("requests", envOr("CTXD_AGENT_REQUESTS", "../shared/agent-requests"), "recorded agent sessions")
	sessions := fs.String("sessions", "opencode,opencode_task,opencode_tools,qwen,qwen_tools", "recorded sessions, comma-separated")
	perts := fs.String("perturb", "date,agents,memory,tools,gitstatus,subagent", "perturbations of each session's last main request (and closed: the session closes, a new one sends it with the date changed)")
	maxChars := fs.Int("max-message-chars", 0, "cut every message to this many characters (0: whole)")
	maxTools := fs.Int("max-tools", 0, "keep each request's first N tools (0: all)")
	latency := fs.Duration("reuse-latency", time.Nanosecond, "the daemon's --reuse-latency (1ns: no recompute budget, the strictest bound)")
	hot := fs.Bool("hot", false, "run the daemon's automatic hot set (default: dense sessions)")
	threads := fs.Int("threads", 0, "llama.cpp threads (0: all CPUs)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	start := time.Now()
	tmpl, err := chat.NewTemplate(chat.ModelInfo{})
	if err != nil {
		return err
	}
	type request struct {
		source, key string
		msgs        []chat.Message
		tools       []chat.Tool
		closeKey    string // the session closed before this request is sent
	}
	var reqs []request
	longest := 0
	for _, name := range strings.Split(*sessions, ",") {
		rss, err := loadRecorded(*dir+"/"+name, "")
		if err != nil {
			return err
		}
		var last request
		for _, r := range rss[0].reqs {
			msgs, tools, err := recordedChat(r.Body)
			if err != nil {
				return fmt.Errorf("%s request %d: %w", name, r.N, err)
			}
			msgs, tools = cutMessages(msgs, *maxChars), cutTools(tools, *maxTools)
			rq := request{source: fmt.Sprintf("%s/%d", name, r.N), key: name + "|" + header(r.Headers, "x-session-id") + "|" + familyKey(msgs), msgs: msgs, tools: tools}
			reqs = append(reqs, rq)
			if !r.side {
				last = rq
			}
		}
		for _, p := range strings.Split(*perts, ",") {
			if p == "subagent" {
				sub := []chat.Message{{Role: chat.RoleSystem, Content: "You are a sub-agent. Answer the one task you are given, then stop."}}
				for _, m := range last.msgs {
					if m.Role == chat.RoleUser {
						sub = append(sub, chat.Message{Role: chat.RoleUser, Content: "Task: " + m.Content})
						break
					}
				}
				reqs = append(reqs, request{source: name + "/subagent", key: name + "|subagent", msgs: sub, tools: last.tools})
				continue
			}
			if p == "closed" {
				// The session closes (its hot set's parked blocks stay
				// as an orphan tape), then a new session sends the
				// request with the date changed.
				if m2, t2, ok := perturb("date", last.msgs, last.tools); ok {
					reqs = append(reqs, request{source: name + "/closed-date", key: name + "|closed", msgs: m2, tools: t2, closeKey: last.key})
				}
				continue
			}
			m2, t2, ok := perturbMore(p, last.msgs, last.tools)
			if !ok {
				continue
			}
			reqs = append(reqs, request{source: name + "/" + p, key: last.key, msgs: m2, tools: t2},
				request{source: name + "/" + p + "-back", key: last.key, msgs: last.msgs, tools: last.tools})
		}
	}
	manifests := make([]client.Manifest, len(reqs))
	for i, rq := range reqs {
		m, err := tmpl.Render(rq.msgs, rq.tools)
		if err != nil {
			return fmt.Errorf("%s: %w", rq.source, err)
		}
		m.Template = "chat:" + tmpl.Name()
		manifests[i] = clientconv.Manifest(m)
		chars := 0
		for _, s := range m.Segments {
			chars += len(s.Text)
		}
		longest = max(longest, chars)
	}
	cfg := sidecar.Config{ModelPath: *model, ContextTokens: longest + 1024, HotTokens: 0, NoCold: true, Threads: *threads,
		ReuseLatency: *latency, TurnLatency: -1, Version: "ctxbench-private"}
	res := boundResult{Model: *model, ReuseLatency: latency.String(), Layout: "dense"}
	if *hot {
		cfg.HotTokens, cfg.ContextTokens, res.Layout = sidecar.HotAuto, 0, "hot"
	}
	c, done, err := privateClient(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()
	live := map[string]*boundSession{}
	var orphaned [][]string // closed sessions' segment texts: a hot set's orphan tapes hold them
	opened := 0
	bar := e.NewProgress("eval bound", int64(len(reqs)), "requests")
	for i, rq := range reqs {
		if cs := live[rq.closeKey]; rq.closeKey != "" && cs != nil {
			if err := cs.s.Close(ctx); err != nil {
				return fmt.Errorf("%s: closing: %w", rq.source, err)
			}
			delete(live, rq.closeKey)
			if *hot {
				orphaned = append(orphaned, cs.segs)
			}
		}
		bs := live[rq.key]
		if bs == nil {
			s, err := c.OpenSession(ctx, "bound-"+rq.source)
			if err != nil {
				return err
			}
			opened++
			bs = &boundSession{name: fmt.Sprintf("s%d", opened), s: s}
			live[rq.key] = bs
		}
		row, err := boundRequest(ctx, bs, live, orphaned, manifests[i])
		bar.Add(1)
		if err != nil {
			bar.Clear()
			return fmt.Errorf("%s: %w", rq.source, err)
		}
		row.Source = rq.source
		if !row.Pass {
			res.Failed++
		}
		res.Rows = append(res.Rows, row)
		if b, err := json.Marshal(row); err == nil {
			fmt.Fprintf(e.Stderr, "request %s\n", b)
		}
	}
	bar.Clear()
	res.Seconds = time.Since(start).Seconds()
	if *asJSON {
		return e.PrintJSON(res)
	}
	fmt.Fprintf(e.Stdout, "eval bound: %s, %s, reuse-latency %s: prefilled <= new + budget + 1\n", res.Model, res.Layout, res.ReuseLatency)
	fmt.Fprintf(e.Stdout, "  %-26s %-4s %7s %7s %7s %7s %7s %7s %7s  %s\n", "request", "sess", "prompt", "new", "prefill", "budget", "exact", "approx", "recomp", "bound")
	for _, r := range res.Rows {
		verdict := "PASS"
		if !r.Pass {
			verdict = "FAIL"
		}
		fmt.Fprintf(e.Stdout, "  %-26s %-4s %7d %7d %7d %7d %7d %7d %7d  %s\n", r.Source, r.Session, r.Prompt, r.New, r.Prefilled, r.Budget, r.Exact, r.Approx, r.Recomputed, verdict)
	}
	fmt.Fprintf(e.Stdout, "  %d requests, %d failed, %.0f s\n", len(res.Rows), res.Failed, res.Seconds)
	if res.Failed > 0 {
		return fmt.Errorf("eval bound: %d of %d requests prefilled more than new + budget + 1", res.Failed, len(res.Rows))
	}
	return nil
}

// boundRequest synchronises bs to m, measures it against the reference and
// decodes one token (the agent's reply starts).
func boundRequest(ctx context.Context, bs *boundSession, live map[string]*boundSession, orphaned [][]string, m client.Manifest) (boundRow, error) {
	held := map[string]bool{}
	for _, o := range live {
		for _, t := range o.segs {
			held[t] = true
		}
	}
	for _, segs := range orphaned {
		for _, t := range segs {
			held[t] = true
		}
	}
	t0 := time.Now()
	r, err := syncTurn(ctx, bs.s, m)
	if err != nil {
		return boundRow{}, err
	}
	ms := float64(time.Since(t0).Microseconds()) / 1000
	ex, err := bs.s.Explain(ctx)
	if err != nil {
		return boundRow{}, err
	}
	var spans []client.SegmentResidency
	for _, sg := range ex.Segments {
		if sg.ID != "<bos>" && sg.ID != "<generated>" {
			spans = append(spans, sg)
		}
	}
	if len(spans) != len(m.Segments) {
		return boundRow{}, fmt.Errorf("explain lists %d segments, the manifest has %d", len(spans), len(m.Segments))
	}
	exact := r.ReusedTokens - r.ApproximateTokens
	matched := 0
	for i, sg := range spans {
		if sg.FirstPosition >= exact && held[m.Segments[i].Text] {
			matched += sg.Tokens
		}
	}
	row := boundRow{Session: bs.name, Prompt: r.PromptTokens, New: r.PromptTokens - exact - matched, Prefilled: r.PrefilledTokens,
		Budget: r.RecomputeBudget, Exact: exact, Approx: r.ApproximateTokens, Recomputed: r.RecomputedTokens, MS: ms, Choice: r.ReuseChoice}
	row.Pass = row.Prefilled <= row.New+row.Budget+1
	if !row.Pass {
		for i, sg := range spans {
			row.Detail += fmt.Sprintf("%s@%d+%d held=%v ", sg.ID, sg.FirstPosition, sg.Tokens, held[m.Segments[i].Text])
		}
	}
	bs.segs = bs.segs[:0]
	for _, sg := range m.Segments {
		bs.segs = append(bs.segs, sg.Text)
	}
	if _, err := bs.s.Decode(ctx, client.DecodeOptions{MaxTokens: 1}, nil); err != nil {
		return row, err
	}
	return row, nil
}

// familyKey names a conversation's family as the HTTP door does: the
// first message's content (the system prompt).
func familyKey(msgs []chat.Message) string {
	if len(msgs) == 0 {
		return ""
	}
	h := sha256.Sum256([]byte(msgs[0].Content))
	return fmt.Sprintf("%x", h[:8])
}

// cutTools keeps the first n tools (0: all).
func cutTools(tools []chat.Tool, n int) []chat.Tool {
	if n <= 0 || len(tools) <= n {
		return tools
	}
	return tools[:n]
}

// memoryBlock is a memory file an agent adds to its system prompt.
const memoryBlock = "\n\n# Memory (from /home/user/.qwen/QWEN.md)\n- The user prefers short answers.\n- Tests run with `python -m pytest`.\n"

// perturbMore is perturb with a memory file added too.
func perturbMore(kind string, msgs []chat.Message, tools []chat.Tool) ([]chat.Message, []chat.Tool, bool) {
	if kind != "memory" {
		return perturb(kind, msgs, tools)
	}
	m := append([]chat.Message(nil), msgs...)
	for i := range m {
		if m[i].Role == chat.RoleSystem {
			m[i].Content += memoryBlock
			return m, tools, true
		}
	}
	return nil, nil, false
}
