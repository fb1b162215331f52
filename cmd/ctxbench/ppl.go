package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/internal/clientconv"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/sidecar"
)

// pplCurve is perplexity against position for one attention setup.
type pplCurve struct {
	Name        string      `json:"name"`
	Tokens      int         `json:"tokens"`
	Buckets     []pplBucket `json:"buckets"`
	InWindow    float64     `json:"ppl_in_window"`
	LastWindows float64     `json:"ppl_last_window"`
}

type pplBucket struct {
	Start int     `json:"start"`
	End   int     `json:"end"`
	PPL   float64 `json:"ppl"`
}

type pplResult struct {
	Model  string     `json:"model"`
	Window int        `json:"window"`
	Tokens int        `json:"tokens"`
	Curves []pplCurve `json:"curves"`
	// CtxdRatio is ctxd's perplexity over the last window divided by the
	// in-window reference's on the same tokens (target ≤ 1.1).
	CtxdRatio float64 `json:"ctxd_last_over_in_window"`
	PNG       string  `json:"png,omitempty"`
}

// evalPPL streams one long text through four setups with teacher forcing
// and reports perplexity against position: dense attention past the
// window, a sliding window without sinks, sinks + recent, and ctxd.
func evalPPL(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("eval ppl", flag.ContinueOnError)
	model := fs.String("model", defaultModel(), "model")
	window := fs.Int("window", 512, "trained window (stories260K: 512)")
	tokens := fs.Int("tokens", 64*512, "stream length")
	denseMax := fs.Int("dense-max", 8192, "dense attention up to this many tokens (quadratic cost)")
	traces := fs.String("traces", envOr("CTXD_TRACES", "../shared/traces"), "text: SWE-agent trajectories")
	png := fs.String("png", "ppl.png", "plot file (empty: none)")
	asJSON := fs.Bool("json", false, "print JSON")
	kvName := fs.String("kv-type", "f16", "KV cache type of every setup")
	sinks := fs.Int("sinks", 0, "ctxd's attention-sink tokens (0: as shipped)")
	hotTokens := fs.Int("hot", 0, "ctxd's hot budget (0: three quarters of the window)")
	recent := fs.Int("recent", 0, "ctxd's recent window (0: as shipped)")
	only := fs.String("only", "", "run only this setup besides the reference (dense, sliding, sinks, ctxd)")
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	kvType, err := policy.ParseKVType(*kvName)
	if err != nil {
		return cli.Usage(err)
	}
	stream, err := corpus(*model, *traces, *tokens)
	if err != nil {
		return err
	}
	w := *window
	hot := sidecar.Config{ModelPath: *model, ContextTokens: w, HotTokens: w, Window: w, ArenaBytes: int64(*tokens+4*w) * 4096, KVType: kvType, NoCold: true}
	// Positions near the end of the trained window are where a model
	// degrades first: at 64× stories260K's window, a hot set filling the
	// whole window scored 1.116 × the in-window reference, one filling
	// three quarters of it 1.032 (docs/BENCHMARKS.md). The hot-set baselines use the
	// same budget.
	hot.HotTokens = w * 3 / 4
	if *hotTokens > 0 {
		hot.HotTokens = *hotTokens
	}
	sliding := hot
	sliding.SinkTokens, sliding.Scorers = sidecar.NoSinks, policy.ScorerNone.String()
	sinksOnly := hot
	sinksOnly.Scorers = policy.ScorerNone.String()
	hot.SinkTokens, hot.RecentTokens = *sinks, *recent
	setups := []struct {
		name string
		cfg  sidecar.Config
		n    int
	}{
		{"dense", sidecar.Config{ModelPath: *model, ContextTokens: min(*tokens, *denseMax) + 16, KVType: kvType, NoCold: true}, min(*tokens, *denseMax)},
		{"sliding window, no sinks", sliding, *tokens},
		{"sinks + recent", sinksOnly, *tokens},
		{"ctxd", hot, *tokens},
	}
	res := pplResult{Model: *model, Window: w, Tokens: *tokens}
	if !*asJSON {
		fmt.Fprintf(e.Stderr, "in-window reference: %d tokens, each window fresh…\n", *tokens)
	}
	bar := e.NewProgress("in-window reference", int64((len(stream)+w-2)/(w-1)), "windows")
	ref, err := windowedNLL(ctx, *model, stream, w, bar)
	bar.Done()
	if err != nil {
		return fmt.Errorf("reference: %w", err)
	}
	res.Curves = append(res.Curves, curve("in-window reference", ref, w))
	var ctxdNLL []float64
	for _, st := range setups {
		if *only != "" && !strings.HasPrefix(st.name, *only) {
			continue
		}
		if !*asJSON {
			fmt.Fprintf(e.Stderr, "%s: %d tokens…\n", st.name, st.n)
		}
		bar := e.NewProgress(st.name, int64(st.n-1), "tokens")
		nll, err := streamNLL(ctx, st.cfg, stream[:st.n], bar)
		bar.Done()
		if err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
		res.Curves = append(res.Curves, curve(st.name, nll, w))
		ctxdNLL = nll
	}
	// ctxd against the reference on the same tokens of the last window.
	lastFrom := len(ctxdNLL) - w
	var a, b float64
	var n int
	for i := lastFrom; i < len(ctxdNLL); i++ {
		if !math.IsNaN(ref[i]) {
			a, b, n = a+ctxdNLL[i], b+ref[i], n+1
		}
	}
	res.CtxdRatio = math.Exp(a/float64(n)) / math.Exp(b/float64(n))
	if *png != "" {
		if err := plotPPL(res, *png); err != nil {
			return err
		}
		res.PNG = *png
	}
	if *asJSON {
		return e.PrintJSON(res)
	}
	fmt.Fprintf(e.Stdout, "perplexity, %s, window %d, %d tokens of trajectory text\n", *model, w, *tokens)
	for _, c := range res.Curves {
		fmt.Fprintf(e.Stdout, "  %-26s in window %7.2f   last window (%d..%d) %7.2f\n", c.Name, c.InWindow, c.Tokens-w, c.Tokens, c.LastWindows)
	}
	fmt.Fprintf(e.Stdout, "  ctxd over the last window / in-window reference on the same tokens: %.3f (at %d× the window)\n", res.CtxdRatio, *tokens/w)
	if res.PNG != "" {
		fmt.Fprintf(e.Stdout, "  plot: %s\n", res.PNG)
	}
	return nil
}

// streamNLL feeds stream after BOS with teacher forcing and returns the
// negative log-likelihood of every token.
func streamNLL(ctx context.Context, cfg sidecar.Config, stream []int32, bar *cli.Progress) ([]float64, error) {
	c, done, err := privateClient(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer done()
	s, err := c.OpenSession(ctx, "eval ppl")
	if err != nil {
		return nil, err
	}
	defer s.Close(ctx)
	// The manifest holds BOS only (added by ctxd); every stream token is
	// then forced, so each step's logits score the next token.
	m := policy.Manifest{Segments: []policy.Segment{{ID: "start", Kind: policy.KindTerminal, Tokens: stream[:1], Stable: true}}}
	if _, err := s.EnsurePrefix(ctx, clientconv.Manifest(m)); err != nil {
		return nil, err
	}
	if _, err := s.PrefillSuffix(ctx); err != nil {
		return nil, err
	}
	nll := make([]float64, 0, len(stream))
	_, err = s.Decode(ctx, client.DecodeOptions{MaxTokens: len(stream) - 1, Forced: stream[1:], ReturnLogits: true}, func(t client.Token) error {
		nll = append(nll, -logSoftmax(t.Logits, t.ID))
		bar.Add(1)
		return nil
	})
	return nll, err
}

func logSoftmax(logits []float32, id int32) float64 {
	mx := math.Inf(-1)
	for _, l := range logits {
		mx = max(mx, float64(l))
	}
	sum := 0.0
	for _, l := range logits {
		sum += math.Exp(float64(l) - mx)
	}
	return float64(logits[id]) - mx - math.Log(sum)
}

// windowedNLL is the in-window reference: the stream cut into windows, each
// scored in a fresh session from BOS, so no token ever sees a position past
// the trained window. The first token of each window has no score (NaN).
func windowedNLL(ctx context.Context, model string, stream []int32, w int, bar *cli.Progress) ([]float64, error) {
	c, done, err := privateClient(ctx, sidecar.Config{ModelPath: model, ContextTokens: w + 16, NoCold: true})
	if err != nil {
		return nil, err
	}
	defer done()
	out := make([]float64, 0, len(stream))
	for start := 0; start < len(stream); start += w - 1 {
		chunk := stream[start:min(start+w-1, len(stream))]
		s, err := c.OpenSession(ctx, "eval ppl reference")
		if err != nil {
			return nil, err
		}
		m := policy.Manifest{Segments: []policy.Segment{{ID: "start", Kind: policy.KindTerminal, Tokens: chunk[:1], Stable: true}}}
		if _, err := s.EnsurePrefix(ctx, clientconv.Manifest(m)); err == nil {
			_, err = s.PrefillSuffix(ctx)
		}
		if err != nil {
			return nil, err
		}
		if start > 0 {
			out = append(out, math.NaN())
		}
		if len(chunk) > 1 {
			_, err = s.Decode(ctx, client.DecodeOptions{MaxTokens: len(chunk) - 1, Forced: chunk[1:], ReturnLogits: true}, func(t client.Token) error {
				out = append(out, -logSoftmax(t.Logits, t.ID))
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
		s.Close(ctx)
		bar.Add(1)
	}
	return out[:len(stream)-1], nil
}

// curve buckets per-token NLL into windows (NaN entries are skipped).
func curve(name string, nll []float64, w int) pplCurve {
	c := pplCurve{Name: name, Tokens: len(nll) + 1}
	for start := 0; start < len(nll); start += w {
		end := min(start+w, len(nll))
		sum, n := 0.0, 0
		for _, x := range nll[start:end] {
			if !math.IsNaN(x) {
				sum, n = sum+x, n+1
			}
		}
		c.Buckets = append(c.Buckets, pplBucket{Start: start + 1, End: end + 1, PPL: math.Exp(sum / float64(max(n, 1)))})
	}
	c.InWindow = c.Buckets[0].PPL
	c.LastWindows = c.Buckets[len(c.Buckets)-1].PPL
	return c
}

func plotPPL(res pplResult, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("perplexity vs position (%d-token window)", res.Window)
	p.X.Label.Text = "position (tokens)"
	p.Y.Label.Text = "perplexity per window"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	var lines []any
	for _, c := range res.Curves {
		pts := make(plotter.XYs, len(c.Buckets))
		for i, b := range c.Buckets {
			pts[i].X, pts[i].Y = float64(b.Start+b.End)/2, b.PPL
		}
		lines = append(lines, c.Name, pts)
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return err
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
