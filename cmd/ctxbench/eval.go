package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/sidecar"
)

func cmdEval(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usageError{fmt.Errorf("which evaluation? recall")}
	}
	switch args[0] {
	case "recall":
		return evalRecall(ctx, e, args[1:])
	case "scale":
		return evalScale(ctx, e, args[1:])
	case "ppl":
		return evalPPL(ctx, e, args[1:])
	}
	return usageError{fmt.Errorf("unknown evaluation %q (recall, ppl, scale)", args[0])}
}

// recallResult is what eval recall reports.
type recallResult struct {
	Model            string   `json:"model"`
	Window           int      `json:"window"`
	DistanceWindows  int      `json:"distance_windows"`
	DistanceTokens   int      `json:"distance_tokens"`
	Trials           int      `json:"trials"`
	Haystack         string   `json:"haystack"`
	BaselineAcc      float64  `json:"baseline_acc"`
	DenseFarAcc      *float64 `json:"dense_far_acc"`
	DenseFarTokens   int      `json:"dense_far_tokens,omitempty"`
	SinksRecentAcc   float64  `json:"sinks_recent_acc"`
	RetrievalAcc     float64  `json:"retrieval_acc"`
	RetrievalHitRate float64  `json:"retrieval_hit_rate"`
	RetrievalRatio   float64  `json:"retrieval_over_baseline"`
	Seconds          float64  `json:"seconds"`
}

// maxDenseTokens bounds the dense-attention comparison (quadratic cost).
const maxDenseTokens = 8192

func evalRecall(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("eval recall", flag.ContinueOnError)
	model := fs.String("model", envOr("CTXD_NEEDLE_MODEL", "../shared/models/needle.gguf"), "model trained to copy from its context")
	hayFile := fs.String("haystack", "", "text file whose tokens fill the haystack (default: random token ids)")
	windows := fs.Int("distance-windows", 64, "trained windows of haystack between the needle and the query")
	trials := fs.Int("trials", 20, "needle placements to average over")
	seed := fs.Int64("seed", 1, "random seed")
	asJSON := fs.Bool("json", false, "print JSON")
	withDense := fs.Bool("dense", true, "also measure dense attention at the distance (capped at 8k tokens)")
	if err := parse(fs, e, args); err != nil {
		return err
	}
	if *trials < 1 || *windows < 1 {
		return usageError{fmt.Errorf("--trials and --distance-windows must be positive")}
	}
	start := time.Now()
	m, err := llama.Load(*model)
	if err != nil {
		return err
	}
	facts := m.Facts()
	var filler []int32
	if *hayFile != "" {
		text, err := os.ReadFile(*hayFile)
		if err != nil {
			m.Close()
			return err
		}
		if filler, err = m.Tokenize(string(text), false); err != nil || len(filler) < 1000 {
			m.Close()
			return fmt.Errorf("haystack %s: %d tokens (need ≥ 1000): %v", *hayFile, len(filler), err)
		}
	}
	m.Close()
	w := facts.TrainedContext
	far := *windows * w
	kv := facts.KVBytesPerToken(policy.KVTypeF16)
	arena := int64(far+4*w) * kv * 2
	res := recallResult{Model: *model, Window: w, DistanceWindows: *windows, DistanceTokens: far, Trials: *trials, Haystack: "random"}
	if *hayFile != "" {
		res.Haystack = *hayFile
	}
	progress := func(format string, a ...any) {
		if !*asJSON {
			fmt.Fprintf(e.stderr, format, a...)
		}
	}
	hot := sidecar.Config{ModelPath: *model, ContextTokens: w, HotTokens: w, ArenaBytes: arena, NoCold: true}
	run := func(label string, cfg sidecar.Config, distance int) (acc, hit float64, err error) {
		c, done, err := privateClient(ctx, cfg)
		if err != nil {
			return 0, 0, err
		}
		defer done()
		rng := rand.New(rand.NewSource(*seed))
		bar := e.newProgress(fmt.Sprintf("%-14s acc -.---", label), int64(*trials), "trials")
		for k := 0; k < *trials; k++ {
			a, h, err := needleTrial(ctx, c, rng, filler, distance)
			if err != nil {
				bar.Clear()
				return 0, 0, fmt.Errorf("%s trial %d: %w", label, k+1, err)
			}
			acc += a
			if h {
				hit++
			}
			bar.SetLabel(fmt.Sprintf("%-14s acc %.3f", label, acc/float64(k+1)))
			bar.Add(1)
		}
		bar.Done()
		if bar == nil {
			progress("%-14s %d trials  acc %.3f\n", label, *trials, acc/float64(*trials))
		}
		return acc / float64(*trials), hit / float64(*trials), nil
	}
	if res.BaselineAcc, _, err = run("baseline", hot, 150-24); err != nil {
		return err
	}
	if *withDense {
		denseFar := min(far, maxDenseTokens-200)
		dense := sidecar.Config{ModelPath: *model, ContextTokens: denseFar + 200, NoCold: true}
		acc, _, err := run("dense far", dense, denseFar)
		if err != nil {
			return err
		}
		res.DenseFarAcc, res.DenseFarTokens = &acc, denseFar
	}
	noRet := hot
	noRet.NoRetrieval = true
	if res.SinksRecentAcc, _, err = run("sinks+recent", noRet, far); err != nil {
		return err
	}
	if res.RetrievalAcc, res.RetrievalHitRate, err = run("retrieval", hot, far); err != nil {
		return err
	}
	if res.BaselineAcc > 0 {
		res.RetrievalRatio = res.RetrievalAcc / res.BaselineAcc
	}
	res.Seconds = time.Since(start).Seconds()
	if *asJSON {
		return e.printJSON(res)
	}
	fmt.Fprintf(e.stdout, "needle recall, %s, window %d, %d trials, haystack %s\n", *model, w, *trials, res.Haystack)
	fmt.Fprintf(e.stdout, "  baseline_acc      %.3f  (needle 150 tokens back, everything in the window)\n", res.BaselineAcc)
	if res.DenseFarAcc != nil {
		fmt.Fprintf(e.stdout, "  dense_far_acc     %.3f  (dense attention, needle %d tokens back)\n", *res.DenseFarAcc, res.DenseFarTokens)
	}
	fmt.Fprintf(e.stdout, "  sinks_recent_acc  %.3f  (hot set without retrieval, %d tokens back)\n", res.SinksRecentAcc, far)
	fmt.Fprintf(e.stdout, "  retrieval_acc     %.3f  (ctxd as shipped, %d tokens back; %.2f × baseline)\n", res.RetrievalAcc, far, res.RetrievalRatio)
	fmt.Fprintf(e.stdout, "  retrieval_hit_rate %.2f  (%.0fs)\n", res.RetrievalHitRate, res.Seconds)
	return nil
}

// needleTrial places a 24-token needle after BOS and 40 filler tokens,
// then distance filler tokens, and asks with the needle's first 4 tokens
// through the session path; the other 20 are teacher-forced and scored.
func needleTrial(ctx context.Context, c *client.Client, rng *rand.Rand, filler []int32, distance int) (float64, bool, error) {
	fill := func(n int) []int32 {
		out := make([]int32, n)
		if len(filler) > 0 {
			off := rng.Intn(len(filler))
			for i := range out {
				out[i] = filler[(off+i)%len(filler)]
			}
			return out
		}
		for i := range out {
			out[i] = int32(3 + rng.Intn(509))
		}
		return out
	}
	needle := make([]int32, 24)
	for i := range needle {
		needle[i] = int32(3 + rng.Intn(509))
	}
	hay := append(append(fill(40), needle...), fill(distance)...)
	s, err := c.OpenSession(ctx, "eval recall")
	if err != nil {
		return 0, false, err
	}
	defer s.Close(context.WithoutCancel(ctx))
	m := policy.Manifest{Segments: []policy.Segment{{ID: "haystack", Kind: policy.KindTerminal, Tokens: hay, Stable: true}}}
	if _, err := s.EnsurePrefix(ctx, m); err != nil {
		return 0, false, err
	}
	if _, err := s.PrefillSuffix(ctx, policy.Segment{ID: "query", Kind: policy.KindUserTurn, Tokens: needle[:4]}); err != nil {
		return 0, false, err
	}
	hit := false
	if ex, err := s.Explain(ctx); err == nil {
		for _, b := range ex.GetRetrieved() {
			// The needle sits at stream positions 41..64 (after BOS).
			if b.GetFirstToken() <= 64 && 41 < b.GetFirstToken()+b.GetTokens() {
				hit = true
			}
		}
	}
	right := 0
	_, err = s.Decode(ctx, client.DecodeOptions{MaxTokens: 20, Forced: needle[4:], NoStream: false}, func(t client.Token) error {
		if t.Predicted == t.ID {
			right++
		}
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	return float64(right) / 20, hit, nil
}
