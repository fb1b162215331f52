package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/internal/clientconv"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/sidecar"
)

func cmdEval(ctx context.Context, e *cli.Env, args []string) error {
	if len(args) == 0 {
		return cli.Usage(fmt.Errorf("which evaluation? recall"))
	}
	switch args[0] {
	case "recall":
		return evalRecall(ctx, e, args[1:])
	case "scale":
		return evalScale(ctx, e, args[1:])
	case "ppl":
		return evalPPL(ctx, e, args[1:])
	case "reuse":
		return evalReuse(ctx, e, args[1:])
	case "bound":
		return evalBound(ctx, e, args[1:])
	}
	return cli.Usage(fmt.Errorf("unknown evaluation %q (recall, ppl, scale, reuse, bound)", args[0]))
}

// recallResult is what eval recall reports.
type recallResult struct {
	Model            string   `json:"model"`
	Window           int      `json:"window"`
	DistanceWindows  int      `json:"distance_windows"`
	DistanceTokens   int      `json:"distance_tokens"`
	Trials           int      `json:"trials"`
	Haystack         string   `json:"haystack"`
	Needle           string   `json:"needle"`
	NeedleSource     string   `json:"needle_source,omitempty"`
	QueryTurnTokens  int      `json:"query_turn_tokens"`
	Needles          int      `json:"needles"`
	Asks             int      `json:"asks"` // needles of this kind asked at the distance, over all trials
	BlockTokens      int      `json:"block_tokens"`
	BaselineAcc      float64  `json:"baseline_acc"`
	DenseFarAcc      *float64 `json:"dense_far_acc"`
	DenseFarTokens   int      `json:"dense_far_tokens,omitempty"`
	SinksRecentAcc   float64  `json:"sinks_recent_acc"`
	RetrievalAcc     float64  `json:"retrieval_acc"`
	RetrievalHitRate float64  `json:"retrieval_hit_rate"`
	RetrievalRatio   float64  `json:"retrieval_over_baseline"`
	// ShippedScorer is the scorer retrieval_acc was measured with: ctxd's
	// default.
	ShippedScorer string `json:"shipped_scorer"`
	// Scorers holds one result per scorer, all asked on the same built
	// haystacks (one build per trial serves every scorer).
	Scorers      map[string]*scorerResult `json:"scorers"`
	BuildSeconds float64                  `json:"build_seconds"`
	Seconds      float64                  `json:"seconds"`
}

// scorerResult is one scorer's figures over the trials.
type scorerResult struct {
	Acc     float64 `json:"acc"`
	HitRate float64 `json:"hit_rate"`
	Ratio   float64 `json:"over_baseline"`
	// ScoringMS is the time to score every parked block, per turn (mean).
	ScoringMS float64 `json:"scoring_ms_per_turn"`
	// SummaryBytes is the memory of the scorer's per-block summaries at
	// the last turn (0 for the lexical index's postings, not counted).
	SummaryBytes int64 `json:"summary_bytes"`
	// TopRank is how often the asked needle's block was the scorer's
	// first candidate.
	TopRank float64 `json:"asked_block_first"`
	// AccOnHits is the accuracy over the asks whose needle block came
	// back: what the model makes of a retrieved needle (beside
	// baseline_acc), apart from what retrieval missed.
	AccOnHits float64 `json:"acc_on_hits"`
}

// maxDenseTokens bounds the dense-attention comparison (quadratic cost).
const maxDenseTokens = 8192

func evalRecall(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("eval recall", flag.ContinueOnError)
	model := fs.String("model", envOr("CTXD_NEEDLE_MODEL", "../shared/models/needle.gguf"), "model trained to copy from its context")
	hayFile := fs.String("haystack", "", "text filling the haystack: files, comma-separated; a .traj gives its messages' text (default: random token ids)")
	needleKind := fs.String("needle", "random", "needle: random (token ids), text (a span of --needle-source), or both (one of each in adjacent blocks, each asked on the same haystack)")
	needleSrc := fs.String("needle-source", "", "text for text needles and query turns: files, comma-separated, none of them in --haystack")
	queryTurn := fs.Int("query-turn", 0, "ask with a user turn of this many tokens of --needle-source text ending with the needle's first 4 tokens (0: the 4 tokens alone)")
	needles := fs.Int("needles", 0, "needles at different depths; one of them is asked (0: 1; with --needle both, pairs in adjacent blocks, every one asked; 0: 2)")
	shipped, _ := (&sidecar.Config{}).ScorerSet()
	scorerList := fs.String("scorers", shipped.String(), "retrieval scorers to measure on the same haystacks, comma-separated (lexical, attention, both); sinks+recent is always measured")
	block := fs.Int("block", 64, "the server's block size (tokens)")
	windows := fs.Int("distance-windows", 64, "trained windows of haystack between the needle and the query")
	trials := fs.Int("trials", 20, "needle placements to average over")
	seed := fs.Int64("seed", 1, "random seed")
	asJSON := fs.Bool("json", false, "print JSON (with --needle both: an object with one result per needle kind)")
	withDense := fs.Bool("dense", true, "also measure dense attention at the distance (capped at 8k tokens)")
	threads := fs.Int("threads", 0, "llama.cpp threads, pinned (0: auto, every core other processes leave free)")
	aloneBaseline := fs.Bool("baseline-alone", false, "diagnostic: leave the needles not asked out of the baseline's window (filler in their place), so that the baseline holds the asked needle alone, as a retrieved block does")
	aloneFar := fs.Bool("far-alone", false, "diagnostic: leave the needles not asked out of the far haystacks (filler in their place); the draws stay those of --needles")
	baselineTokens := fs.Int("baseline-tokens", 0, "diagnostic: the baseline's haystack length in tokens (0: its own layout; at most what the window holds beside the query turn and the answer)")
	trialLog := fs.String("trial-log", "", "write one JSON line per ask (baseline and each scorer) to this file: accuracy, the needle's span, its offset in its block, the retrieved blocks and the hot ranges")
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	if *needles == 0 {
		*needles = 1
		if *needleKind == "both" {
			*needles = 2
		}
	}
	switch {
	case *trials < 1 || *windows < 1:
		return cli.Usage(fmt.Errorf("--trials and --distance-windows must be positive"))
	case *needles < 1:
		return cli.Usage(fmt.Errorf("--needles must be positive"))
	case *queryTurn != 0 && *queryTurn < askTokens:
		return cli.Usage(fmt.Errorf("--query-turn %d: a query turn ends with the needle's first %d tokens, so it needs at least %d", *queryTurn, askTokens, askTokens))
	case *needleKind != "random" && *needleKind != "text" && *needleKind != "both":
		return cli.Usage(fmt.Errorf("--needle %q: random, text or both", *needleKind))
	case *needleKind == "both" && *needles%2 != 0:
		return cli.Usage(fmt.Errorf("--needle both places needles in pairs, a random and a text one (--needles even)"))
	case (*needleKind != "random" || *queryTurn > askTokens) && *needleSrc == "":
		return cli.Usage(fmt.Errorf("text needles and query turns need --needle-source"))
	}
	if f := sameFiles(*hayFile, *needleSrc); f != "" {
		return cli.Usage(fmt.Errorf("%s is both haystack and needle source: keep them apart", f))
	}
	var modes []policy.ScorerSet
	for _, name := range strings.Split(*scorerList, ",") {
		sc, err := policy.ParseScorerSet(name)
		if err != nil || sc == policy.ScorerNone {
			return cli.Usage(fmt.Errorf("--scorers: %q is not lexical, attention or both", name))
		}
		modes = append(modes, sc)
	}
	start := time.Now()
	m, err := llama.Load(*model)
	if err != nil {
		return err
	}
	facts := m.Facts()
	var filler, source []int32
	if *hayFile != "" {
		if filler, err = textTokens(m, *hayFile); err == nil && len(filler) < 1000 {
			err = fmt.Errorf("haystack %s: %d tokens (need ≥ 1000)", *hayFile, len(filler))
		}
	}
	if err == nil && *needleSrc != "" {
		if source, err = textTokens(m, *needleSrc); err == nil && len(source) < 4*(*queryTurn+needleTokens) {
			err = fmt.Errorf("needle source %s: %d tokens (need ≥ %d)", *needleSrc, len(source), 4*(*queryTurn+needleTokens))
		}
	}
	m.Close()
	if err != nil {
		return err
	}
	srcs := newNeedleSources(filler, source, facts.VocabSize)
	if *trialLog != "" {
		f, err := os.Create(*trialLog)
		if err != nil {
			return err
		}
		defer f.Close()
		srcs.log = &trialLogger{enc: json.NewEncoder(f)}
	}
	w := facts.TrainedContext
	far := *windows * w
	kv := facts.KVBytesPerToken(policy.KVTypeF16)
	arena := int64(far+4*w) * kv * 2
	kinds := []bool{*needleKind == "text"}
	if *needleKind == "both" {
		kinds = []bool{false, true}
	}
	results := map[bool]*recallResult{}
	for _, text := range kinds {
		r := &recallResult{Model: *model, Window: w, DistanceWindows: *windows, DistanceTokens: far, Trials: *trials, Haystack: "random",
			Needle: kindName(text), NeedleSource: *needleSrc, QueryTurnTokens: max(askTokens, *queryTurn), Needles: *needles, BlockTokens: *block,
			ShippedScorer: shipped.String(), Scorers: map[string]*scorerResult{}}
		if *hayFile != "" {
			r.Haystack = *hayFile
		}
		results[text] = r
	}
	shape := trialShape{distance: far, needles: *needles, queryTurn: *queryTurn, window: w, block: *block, sinks: 4, kind: *needleKind, aloneFar: *aloneFar}
	hot := sidecar.Config{ModelPath: *model, ContextTokens: w, HotTokens: w, ArenaBytes: arena, NoCold: true, BlockTokens: *block, SinkTokens: 4, Threads: *threads}
	for _, sc := range modes {
		if sc.Has(policy.ScorerAttention) {
			hot.Scorers = policy.ScorerBoth.String() // key summaries at seal, as a server ranking with attention keeps them
		}
	}

	base := shape
	base.baseline, base.distance, base.aloneBaseline, base.baselineTokens = true, 0, *aloneBaseline, *baselineTokens
	if base.kind == "both" {
		base.needles = 2 // one pair fits one window
	}
	accs, err := recallRun(ctx, e, "baseline", hot, srcs, base, *trials, *seed)
	if err != nil {
		return err
	}
	for text, r := range results {
		r.BaselineAcc = accs[text]
	}
	if *withDense {
		dshape := shape
		dshape.distance = min(far, maxDenseTokens-200)
		dense := sidecar.Config{ModelPath: *model, ContextTokens: dshape.distance + 200 + max(askTokens, *queryTurn), NoCold: true, Threads: *threads}
		accs, err := recallRun(ctx, e, "dense far", dense, srcs, dshape, *trials, *seed)
		if err != nil {
			return err
		}
		for text, r := range results {
			acc := accs[text]
			r.DenseFarAcc, r.DenseFarTokens = &acc, dshape.distance
		}
	}
	all := append([]policy.ScorerSet{policy.ScorerNone}, modes...)
	figs, asks, build, err := recallScorers(ctx, e, hot, srcs, shape, *trials, *seed, all)
	if err != nil {
		return err
	}
	for text, r := range results {
		r.BuildSeconds, r.Asks = build.Seconds(), asks[text]
		r.SinksRecentAcc = figs[text][0].Acc
		for i, sc := range modes {
			f := figs[text][i+1]
			if r.BaselineAcc > 0 {
				f.Ratio = f.Acc / r.BaselineAcc
			}
			r.Scorers[sc.String()] = f
		}
		f := r.Scorers[shipped.String()]
		if f == nil {
			r.ShippedScorer = modes[0].String()
			f = r.Scorers[modes[0].String()]
		}
		r.RetrievalAcc, r.RetrievalHitRate, r.RetrievalRatio = f.Acc, f.HitRate, f.Ratio
		r.Seconds = time.Since(start).Seconds()
	}
	if *asJSON {
		if len(kinds) == 1 {
			return e.PrintJSON(results[kinds[0]])
		}
		return e.PrintJSON(map[string]*recallResult{"random": results[false], "text": results[true]})
	}
	for _, text := range kinds {
		res := results[text]
		fmt.Fprintf(e.Stdout, "needle recall, %s, window %d, %d trials (%d asks), haystack %s, %s needle (%d needles in the haystack), query turn %d tokens\n",
			*model, w, *trials, res.Asks, res.Haystack, res.Needle, res.Needles, res.QueryTurnTokens)
		fmt.Fprintf(e.Stdout, "  baseline_acc      %.3f  (everything in one window)\n", res.BaselineAcc)
		if res.DenseFarAcc != nil {
			fmt.Fprintf(e.Stdout, "  dense_far_acc     %.3f  (dense attention, needle %d tokens back)\n", *res.DenseFarAcc, res.DenseFarTokens)
		}
		fmt.Fprintf(e.Stdout, "  sinks_recent_acc  %.3f  (hot set without retrieval, %d tokens back)\n", res.SinksRecentAcc, far)
		for _, sc := range modes {
			f := res.Scorers[sc.String()]
			fmt.Fprintf(e.Stdout, "  %-10s acc %.3f (%.2f × baseline)  hit rate %.2f  acc on hits %.3f  first %.2f  scoring %.2f ms/turn  summaries %d B\n",
				sc, f.Acc, f.Ratio, f.HitRate, f.AccOnHits, f.TopRank, f.ScoringMS, f.SummaryBytes)
		}
		fmt.Fprintf(e.Stdout, "  retrieval_acc     %.3f  (%s, as shipped)  retrieval_hit_rate %.2f  (%.0fs, %.0fs building haystacks)\n",
			res.RetrievalAcc, res.ShippedScorer, res.RetrievalHitRate, res.Seconds, res.BuildSeconds)
	}
	return nil
}

func kindName(text bool) string {
	if text {
		return "text"
	}
	return "random"
}

// recallRun measures trials on a server of its own (the baseline, dense
// attention), with its default scorer, and returns the accuracy per
// needle kind (text or not).
func recallRun(ctx context.Context, e *cli.Env, label string, cfg sidecar.Config, srcs *needleSources, sh trialShape, trials int, seed int64) (map[bool]float64, error) {
	c, done, err := privateClient(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer done()
	rng := rand.New(rand.NewSource(seed))
	bar := e.NewProgress(fmt.Sprintf("%-14s acc -.---", label), int64(trials), "trials")
	defer bar.Done()
	acc, n := map[bool]float64{}, map[bool]float64{}
	for k := 0; k < trials; k++ {
		t, err := srcs.draw(rng, sh)
		if err != nil {
			return nil, err
		}
		s, err := buildHaystack(ctx, c, t)
		if err != nil {
			return nil, fmt.Errorf("%s trial %d: %w", label, k+1, err)
		}
		for i, q := range t.asks {
			if i > 0 {
				if err := dropAsk(ctx, s, q); err != nil {
					return nil, err
				}
			}
			a, ex, err := askNeedle(ctx, s, t, q)
			if err != nil {
				s.Close(context.WithoutCancel(ctx))
				return nil, fmt.Errorf("%s trial %d: %w", label, k+1, err)
			}
			srcs.log.ask(label, k, t, q, sh.block, sh.sinks, a, ex)
			acc[q.text] += a
			n[q.text]++
		}
		s.Close(context.WithoutCancel(ctx))
		bar.Add(1)
	}
	for kind := range acc {
		acc[kind] /= n[kind]
	}
	return acc, nil
}

// dropAsk drops the previous ask from the session: a one-token turn
// truncates the tape back to the haystack, so that no ask sees another's
// query turn in the KV.
func dropAsk(ctx context.Context, s *client.Session, next ask) error {
	reset := engine.Token(3)
	if next.query[0] == reset {
		reset++
	}
	_, err := s.PrefillSuffix(ctx, client.Segment{ID: "reset", Kind: client.KindUserTurn, Tokens: []int32{reset}})
	return err
}

// recallScorers builds each trial's haystack once on a hot-set server and
// asks each of its questions once per scorer (modes[0] first), dropping
// the previous ask before the next. It returns per needle kind (text or
// not) one result per mode.
func recallScorers(ctx context.Context, e *cli.Env, cfg sidecar.Config, srcs *needleSources, sh trialShape, trials int, seed int64, modes []policy.ScorerSet) (map[bool][]*scorerResult, map[bool]int, time.Duration, error) {
	cfg.Engine = llama.Backend{}
	p, err := sidecar.StartPrivate(cfg)
	if err != nil {
		return nil, nil, 0, err
	}
	defer p.Stop()
	c, err := client.Dial(ctx, p.Socket, client.Options{Name: "ctxbench eval recall"})
	if err != nil {
		return nil, nil, 0, err
	}
	defer c.Close()
	rng := rand.New(rand.NewSource(seed))
	figs := map[bool][]*scorerResult{}
	asked := map[bool]float64{}
	var build time.Duration
	bar := e.NewProgress("far           ", int64(trials), "trials")
	defer bar.Done()
	for k := 0; k < trials; k++ {
		t, err := srcs.draw(rng, sh)
		if err != nil {
			return nil, nil, 0, err
		}
		t0 := time.Now()
		s, err := buildHaystack(ctx, c, t)
		build += time.Since(t0)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("trial %d: %w", k+1, err)
		}
		first := true
		for _, q := range t.asks {
			if figs[q.text] == nil {
				for range modes {
					figs[q.text] = append(figs[q.text], &scorerResult{})
				}
			}
			asked[q.text]++
			for i, mode := range modes {
				if !first {
					// Retrieval off for the one-token reset turn.
					if err := p.Server.SetScorers(ctx, policy.ScorerNone); err != nil {
						return nil, nil, 0, err
					}
					if err := dropAsk(ctx, s, q); err != nil {
						return nil, nil, 0, err
					}
				}
				first = false
				if err := p.Server.SetScorers(ctx, mode); err != nil {
					return nil, nil, 0, err
				}
				a, ex, err := askNeedle(ctx, s, t, q)
				if err != nil {
					return nil, nil, 0, fmt.Errorf("trial %d, %s: %w", k+1, mode, err)
				}
				srcs.log.ask(mode.String(), k, t, q, sh.block, sh.sinks, a, ex)
				f := figs[q.text][i]
				f.Acc += a
				lo, hi := t.span(q)
				in := func(first, n int) bool { return first < hi && lo < first+n }
				for _, b := range ex.Retrieved {
					if in(b.FirstToken, b.Tokens) {
						f.HitRate++
						f.AccOnHits += a
						break
					}
				}
				if lr := ex.LastRetrieval; lr != nil {
					for _, sr := range lr.Scorer {
						f.ScoringMS += float64(sr.Scoring.Microseconds()) / 1000
						f.SummaryBytes = max(f.SummaryBytes, sr.SummaryBytes)
						if sr.Name == mode.String() || mode == policy.ScorerBoth && sr.Name == "fused" {
							if top := sr.Top; len(top) > 0 && in(top[0].FirstToken, top[0].Tokens) {
								f.TopRank++
							}
						}
					}
				}
			}
		}
		s.Close(context.WithoutCancel(ctx))
		bar.Add(1)
	}
	counts := map[bool]int{}
	for kind, fs := range figs {
		n := asked[kind]
		counts[kind] = int(n)
		for _, f := range fs {
			if f.HitRate > 0 {
				f.AccOnHits /= f.HitRate
			}
			f.Acc, f.HitRate, f.ScoringMS, f.TopRank = f.Acc/n, f.HitRate/n, f.ScoringMS/n, f.TopRank/n
		}
	}
	return figs, counts, build, nil
}

// buildHaystack opens a session and streams the trial's haystack in as
// its stable prompt.
func buildHaystack(ctx context.Context, c *client.Client, t *trial) (*client.Session, error) {
	s, err := c.OpenSession(ctx, "eval recall")
	if err != nil {
		return nil, err
	}
	m := policy.Manifest{Segments: []policy.Segment{{ID: "haystack", Kind: policy.KindTerminal, Tokens: t.hay, Stable: true}}}
	if _, err := s.EnsurePrefix(ctx, clientconv.Manifest(m)); err != nil {
		s.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return s, nil
}

// askNeedle sends the query turn through PrefillSuffix (retrieval runs
// there) and scores the asked needle's other tokens, teacher-forced
// (top-1); it returns the accuracy and Explain after the turn's
// retrieval.
func askNeedle(ctx context.Context, s *client.Session, t *trial, q ask) (float64, client.Explanation, error) {
	if _, err := s.PrefillSuffix(ctx, client.Segment{ID: "query", Kind: client.KindUserTurn, Tokens: q.query}); err != nil {
		return 0, client.Explanation{}, err
	}
	ex, err := s.Explain(ctx)
	if err != nil {
		return 0, client.Explanation{}, err
	}
	ndl := t.needles[q.needle]
	right := 0
	_, err = s.Decode(ctx, client.DecodeOptions{MaxTokens: len(ndl) - askTokens, Forced: ndl[askTokens:]}, func(tok client.Token) error {
		if tok.Predicted == tok.ID {
			right++
		}
		return nil
	})
	if err != nil {
		return 0, client.Explanation{}, err
	}
	return float64(right) / float64(len(ndl)-askTokens), ex, nil
}
