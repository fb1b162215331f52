package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"sort"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/internal/clientconv"
	"github.com/ctxd/ctxd/internal/trace"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/sidecar"
)

// scaleResult is what eval scale reports.
type scaleResult struct {
	Model      string  `json:"model"`
	Tokens     int     `json:"tokens"`
	Hot        int     `json:"hot_tokens"`
	Window     int     `json:"window"`
	ColdBuildS float64 `json:"cold_build_s"`
	BuildTokS  float64 `json:"build_tokens_per_s"`
	Turns      int     `json:"turns"`
	TurnMS     float64 `json:"turn_ms_200k"`
	TurnMS8k   float64 `json:"turn_ms_8k"`
	Ratio      float64 `json:"turn_ratio"`
	HotTokens  int64   `json:"hot_tokens_after"`
	Parked     int64   `json:"parked_tokens_after"`
	Evictions  int64   `json:"evictions"`
	Admissions int64   `json:"admissions"`
	// ScoringMS is the last turn's time to score every parked block (all
	// scorers), part of turn_ms_200k.
	ScoringMS float64 `json:"scoring_ms_200k"`
	Scorers   string  `json:"scorers"` // the last turn's
}

// evalScale builds a long session by streaming, then times turns on it and
// on an 8k-token session.
func evalScale(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("eval scale", flag.ContinueOnError)
	model := fs.String("model", defaultModel(), "model")
	tokens := fs.Int("tokens", 200000, "session length to build")
	window := fs.Int("window", 512, "trained window (stories260K was trained on 512-token sequences)")
	turns := fs.Int("turns", 5, "turns to time (median)")
	traces := fs.String("traces", envOr("CTXD_TRACES", "../shared/traces"), "text for the session: SWE-agent trajectories")
	asJSON := fs.Bool("json", false, "print JSON")
	threads := fs.Int("threads", 0, "llama.cpp threads, pinned (0: auto, every core other processes leave free)")
	scorers := fs.String("scorers", "", "retrieval scorers: lexical, attention, both (default: ctxd's)")
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	text, err := corpus(*model, *traces, *tokens+*turns*200)
	if err != nil {
		return err
	}
	// The arena holds the whole session: 2 KiB a token was stories260K's
	// size with room to spare; a bigger model needs its own KV size.
	perToken := int64(2048)
	if l, err := llama.ReadLayout(*model); err == nil {
		kv := policy.KVBytesPerToken(l.Layers, l.KVHeads, l.HeadDim, policy.KVTypeF16)
		perToken = max(perToken, kv+kv/8)
	}
	cfg := sidecar.Config{ModelPath: *model, ContextTokens: *window, HotTokens: *window, Window: *window, ArenaBytes: int64(*tokens+8192) * perToken, NoCold: true, Threads: *threads, Scorers: *scorers}
	c, done, err := privateClient(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()
	res := scaleResult{Model: *model, Tokens: *tokens, Hot: *window, Window: *window, Turns: *turns}
	progress := func(f string, a ...any) {
		if !*asJSON {
			fmt.Fprintf(e.Stderr, f, a...)
		}
	}
	run := func(n int) (build time.Duration, turn float64, ex *client.Session, err error) {
		s, err := c.OpenSession(ctx, fmt.Sprintf("scale %d", n))
		if err != nil {
			return 0, 0, nil, err
		}
		m := policy.Manifest{Segments: []policy.Segment{{ID: "context", Kind: policy.KindTerminal, Tokens: text[:n], Stable: true}}}
		// The session is built in up to 50 growing EnsurePrefix calls (each
		// keeps what is there and streams the rest in), so progress shows.
		bar := e.NewProgress(fmt.Sprintf("building %d tokens", n), int64(n), "tokens")
		step := max(n/50, 4096)
		t0 := time.Now()
		for end := min(step, n); ; end = min(end+step, n) {
			part := policy.Manifest{Segments: []policy.Segment{{ID: "context", Kind: policy.KindTerminal, Tokens: text[:end], Stable: true}}}
			if _, err := s.EnsurePrefix(ctx, clientconv.Manifest(part)); err != nil {
				bar.Clear()
				return 0, 0, nil, err
			}
			bar.Set(int64(end))
			if end == n {
				break
			}
		}
		build = time.Since(t0)
		bar.Clear()
		progress("built %d tokens in %.1fs\n", n, build.Seconds())
		var lat []float64
		for k := 0; k < *turns; k++ {
			q := text[n+k*200 : n+k*200+100]
			t0 := time.Now()
			if _, err := s.EnsurePrefix(ctx, clientconv.Manifest(m)); err != nil {
				return 0, 0, nil, err
			}
			if _, err := s.PrefillSuffix(ctx, client.Segment{ID: fmt.Sprintf("turn%d", k), Kind: client.KindUserTurn, Tokens: q}); err != nil {
				return 0, 0, nil, err
			}
			if _, err := s.Decode(ctx, client.DecodeOptions{MaxTokens: 16, NoStream: true}, nil); err != nil {
				return 0, 0, nil, err
			}
			lat = append(lat, float64(time.Since(t0).Microseconds())/1000)
		}
		sort.Float64s(lat)
		progress("turns on %d tokens: median %.1f ms\n", n, lat[len(lat)/2])
		return build, lat[len(lat)/2], s, nil
	}
	build, turn, s, err := run(*tokens)
	if err != nil {
		return err
	}
	res.ColdBuildS, res.TurnMS = build.Seconds(), turn
	res.BuildTokS = float64(*tokens) / build.Seconds()
	if ex, err := s.Explain(ctx); err == nil {
		res.HotTokens, res.Parked, res.Evictions, res.Admissions = int64(ex.HotTokens), int64(ex.ParkedTokens), int64(ex.Evictions), int64(ex.Admissions)
		if lr := ex.LastRetrieval; lr != nil {
			res.Scorers = lr.Scorers
			for _, sr := range lr.Scorer {
				res.ScoringMS += float64(sr.Scoring.Microseconds()) / 1000
			}
		}
	}
	s.Close(ctx)
	if _, res.TurnMS8k, s, err = run(min(8192, *tokens)); err != nil {
		return err
	}
	s.Close(ctx)
	res.Ratio = res.TurnMS / res.TurnMS8k
	if *asJSON {
		return e.PrintJSON(res)
	}
	fmt.Fprintf(e.Stdout, "scale: %d-token session of %s, hot %d, window %d\n", *tokens, *model, *window, *window)
	fmt.Fprintf(e.Stdout, "  cold_build_s   %.1f  (%.0f tokens/s; %d evictions)\n", res.ColdBuildS, res.BuildTokS, res.Evictions)
	fmt.Fprintf(e.Stdout, "  turn_ms_200k   %.1f  (median of %d turns: 100-token suffix, retrieval, 16 tokens decoded)\n", res.TurnMS, *turns)
	fmt.Fprintf(e.Stdout, "  turn_ms_8k     %.1f\n  ratio          %.2f\n", res.TurnMS8k, res.Ratio)
	fmt.Fprintf(e.Stdout, "  scoring_ms_200k %.2f  (the last turn's retrieval scoring, included above)\n", res.ScoringMS)
	return nil
}

// corpus tokenizes trajectory text until it has n tokens, repeating it.
func corpus(model, traces string, n int) ([]int32, error) {
	m, err := llama.Load(model)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	files, _ := filepath.Glob(filepath.Join(traces, "*.traj"))
	var all []int32
	for _, f := range files {
		tr, err := trace.Load(f)
		if err != nil {
			return nil, err
		}
		for _, msg := range tr.History {
			toks, err := m.Tokenize(msg.Content, false)
			if err != nil {
				return nil, err
			}
			all = append(all, toks...)
		}
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("no text in %s", traces)
	}
	out := make([]int32, 0, n)
	for len(out) < n {
		out = append(out, all[:min(len(all), n-len(out))]...)
	}
	return out, nil
}
