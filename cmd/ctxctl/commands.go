package main

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/internal/clientconv"
	"github.com/ctxd/ctxd/policy"
)

func cmdStatus(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	st, err := cli.Query(ctx, e, fs, args, func(c *client.Client) (client.Status, error) { return c.Status(ctx) })
	if err != nil {
		return err
	}
	if *asJSON {
		return e.PrintJSON(st)
	}
	w := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "server\t%s (up %.1fs)\n", st.ServerVersion, st.Uptime.Seconds())
	fmt.Fprintf(w, "sessions\t%d\n", st.Sessions)
	if m := st.Model; m != nil {
		fmt.Fprintf(w, "model\t%s\n", m.Path)
		fmt.Fprintf(w, "  digest\t%s\n", m.Digest)
		fmt.Fprintf(w, "  shape\t%s: %d layers, %d KV heads × %d, trained context %d, vocab %d\n",
			m.Description, m.Layers, m.KVHeads, m.HeadDim, m.TrainedContext, m.VocabSize)
	} else {
		fmt.Fprintf(w, "model\tnone loaded\n")
	}
	if cp := st.Capacity; cp != (client.Capacity{}) {
		fmt.Fprintf(w, "kv\t%s, %d bytes/token, flash attention %v\n", st.KVType, cp.KVBytesPerToken, st.FlashAttention)
		fmt.Fprintf(w, "context\t%d tokens (effective %d; %s)\n", cp.ContextTokens, cp.EffectiveTokens, cp.Reason)
		fmt.Fprintf(w, "memory\t%s: %.1f GiB usable, weights %.1f MiB, overhead %.1f MiB\n", cp.MemoryKind,
			float64(cp.UsableBytes)/(1<<30), float64(cp.WeightsBytes)/(1<<20), float64(cp.OverheadBytes)/(1<<20))
	}
	if d := st.Device; d != nil {
		// The daemon appends how it chose the CPU threads to the reason.
		reason, threadsWhy, _ := strings.Cut(d.Reason, "; cpu threads: ")
		if d.Name == "" {
			fmt.Fprintf(w, "device\tCPU: all %d layers and the KV in host memory (%s)\n", d.Layers, reason)
		} else {
			fmt.Fprintf(w, "device\t%s (%s, %s): %d of %d layers, output head %v; %.1f of %.1f GiB free at load\n",
				d.Name, d.Backend, d.Description, d.GPULayers, d.Layers, d.OutputOnDevice,
				float64(d.FreeBytes)/(1<<30), float64(d.TotalBytes)/(1<<30))
			fmt.Fprintf(w, "  device memory\tweights %.1f MiB, KV %.1f MiB, compute %.1f MiB; host: weights %.1f MiB, KV %.1f MiB\n",
				mib(d.WeightsBytes), mib(d.KVBytes), mib(d.ComputeBytes), mib(d.HostWeightsBytes), mib(d.HostKVBytes))
			fmt.Fprintf(w, "  placement\t%s\n", reason)
		}
		fmt.Fprintf(w, "  cpu threads\t%d in the last decode call\n", d.Threads)
		if threadsWhy != "" {
			fmt.Fprintf(w, "  threads chosen\t%s\n", threadsWhy)
		}
	}
	if cp := st.Capacity; cp.HotTokens > 0 {
		fmt.Fprintf(w, "hot set\t%d tokens below window %d; arena %.1f MiB = %d tokens; sessions up to %d tokens\n",
			cp.HotTokens, cp.WindowTokens, float64(cp.ArenaBytes)/(1<<20), cp.ArenaTokens, cp.SessionTokens)
	}
	if cs := st.Cold; cs.Enabled {
		fmt.Fprintf(w, "ssd tier\t%s: %d blocks, %.1f MiB (%.1f MiB raw) of quota %.1f MiB, %d snapshots\n", cs.Dir, cs.Blocks,
			mib(cs.Bytes), mib(cs.RawBytes), mib(cs.QuotaBytes), cs.Snapshots)
		if u := cs.Unavailable; u != "" {
			fmt.Fprintf(w, "  standing aside\t%s\n", u)
		}
	} else {
		fmt.Fprintf(w, "ssd tier\toff: %s\n", cs.Unavailable)
	}
	fmt.Fprintf(w, "engine\t%s\n", st.SystemInfo)
	return w.Flush()
}

func cmdExplain(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	id := fs.Uint64("session", 0, "session id (0: the most recently used)")
	asJSON := fs.Bool("json", false, "print JSON")
	png := fs.String("png", "", "also draw the context as a PNG file: segments, classes, hot, parked, retrieved")
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	c, err := e.Dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ex, err := c.Explain(ctx, *id)
	if err != nil {
		return err
	}
	if *png != "" {
		if err := writeExplainPNG(ex, *png); err != nil {
			return err
		}
		fmt.Fprintf(e.Stderr, "picture: %s\n", *png)
	}
	if *asJSON {
		return e.PrintJSON(ex)
	}
	fmt.Fprintf(e.Stdout, "session %d: %d tokens resident (%d generated), compat %s\n", ex.SessionID, ex.ResidentTokens, ex.GeneratedTokens, ex.CompatKey)
	if cp := ex.Capacity; cp != (client.Capacity{}) {
		fmt.Fprintf(e.Stdout, "context %d tokens, %d bytes/token; %s\n", cp.ContextTokens, cp.KVBytesPerToken, cp.Reason)
	}
	if lp := ex.LastPrefix; lp != nil {
		fmt.Fprintf(e.Stdout, "last prefill: %d prompt tokens: %d reused exactly, %d reused approximately (moved past an early change), %d prefilled (%d of them recomputed from reused segments)\n",
			lp.PromptTokens, lp.ExactTokens(), lp.ApproximateTokens, lp.PrefilledTokens, lp.RecomputedTokens)
		if lp.ReuseChoice != "" {
			fmt.Fprintf(e.Stdout, "  segment reuse: %s\n", lp.ReuseChoice)
		}
	}
	if ex.ApproximateTokens > 0 {
		fmt.Fprintf(e.Stdout, "approximate KV: the last %d tokens of the stream (exact reuse: ask with exact_reuse / X-Ctxd-Reuse: exact)\n", ex.ApproximateTokens)
	}
	if ex.HotTokens > 0 || ex.ParkedBlocks > 0 {
		fmt.Fprintf(e.Stdout, "hot set: %d tokens hot, %d parked (%d blocks hot, %d parked, %d lost); protected %d, retrieved %d; %d evictions, %d admissions\n",
			ex.HotTokens, ex.ParkedTokens, ex.HotBlocks, ex.ParkedBlocks, ex.LostBlocks,
			ex.ProtectedTokens, ex.RetrievedTokens, ex.Evictions, ex.Admissions)
		for _, b := range ex.Retrieved {
			fmt.Fprintf(e.Stdout, "  retrieved block %d: tokens %d..%d, %s\n", b.BlockID, b.FirstToken, b.FirstToken+b.Tokens, b.Reason)
		}
		if lr := ex.LastRetrieval; lr != nil {
			fmt.Fprintf(e.Stdout, "  last retrieval (turn %d, %s): query %d tokens, room %d tokens\n", lr.Turn, lr.Scorers, lr.QueryTokens, lr.BudgetTokens)
			for _, sr := range lr.Scorer {
				fmt.Fprintf(e.Stdout, "    %s: %d blocks scored in %.2f ms, summaries %d bytes\n", sr.Name, sr.Blocks, float64(sr.Scoring.Microseconds())/1000, sr.SummaryBytes)
				for _, c := range sr.Top {
					mark := ""
					if c.Admitted {
						mark = "  admitted"
					}
					fmt.Fprintf(e.Stdout, "      #%d block %d: tokens %d..%d, score %.4g%s\n", c.Rank, c.BlockID, c.FirstToken, c.FirstToken+c.Tokens, c.Score, mark)
				}
			}
		}
		for _, d := range ex.Diagnostics {
			fmt.Fprintf(e.Stdout, "  note: %s\n", d)
		}
	}
	classes := make([]string, 0, len(ex.TokensByClass))
	for k := range ex.TokensByClass {
		classes = append(classes, k)
	}
	sort.Strings(classes)
	for _, k := range classes {
		fmt.Fprintf(e.Stdout, "  %-12s %d tokens\n", k, ex.TokensByClass[k])
	}
	w := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "segment\tkind\tclass\tstable\tfirst\ttokens\tin engine")
	for _, s := range ex.Segments {
		kind := s.Kind.String()
		fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%d\t%d\t%d\n", s.ID, kind, s.Class.String(), s.Stable, s.FirstPosition, s.Tokens, s.ResidentTokens)
	}
	return w.Flush()
}

func cmdGenerate(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	prompt := fs.String("prompt", "", "prompt text")
	maxTokens := fs.Int("max-tokens", 64, "tokens to generate")
	temp := fs.Float64("temperature", 0, "sampling temperature (0: greedy)")
	topK := fs.Int("top-k", 40, "top-k (with temperature)")
	topP := fs.Float64("top-p", 0.95, "top-p (with temperature)")
	seed := fs.Uint64("seed", 1, "sampling seed")
	stop := fs.String("stop", "", "stop string")
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	if *prompt == "" {
		return cli.Usage(fmt.Errorf("--prompt is required"))
	}
	c, err := e.Dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.OpenSession(ctx, "ctxctl generate")
	if err != nil {
		return err
	}
	m := policy.Manifest{Segments: []policy.Segment{{ID: "prompt", Kind: policy.KindUserTurn, Text: *prompt}}}
	pctx, done := e.CallProgress(ctx, "prefill")
	_, err = s.EnsurePrefix(pctx, clientconv.Manifest(m))
	if err == nil {
		_, err = s.PrefillSuffix(pctx)
	}
	done()
	if err != nil {
		return err
	}
	o := client.DecodeOptions{MaxTokens: *maxTokens, Temperature: float32(*temp), TopK: *topK, TopP: float32(*topP), Seed: *seed}
	if *stop != "" {
		o.Stop = []string{*stop}
	}
	fmt.Fprint(e.Stdout, *prompt)
	res, err := s.Decode(ctx, o, func(t client.Token) error {
		_, err := fmt.Fprint(e.Stdout, t.Piece)
		return err
	})
	fmt.Fprintln(e.Stdout)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.Stderr, "[%d tokens, %s, %s]\n", res.Tokens, res.Reason, res.Elapsed.Round(1e5))
	return s.Close(ctx)
}

func cmdLoad(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	model := fs.String("model", "", "GGUF file (a path on the daemon's machine)")
	ctxTokens := fs.Int("ctx", 0, "context tokens (0: derived)")
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	if *model == "" {
		return cli.Usage(fmt.Errorf("--model is required"))
	}
	c, err := e.Dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	r, err := c.LoadModel(ctx, *model, *ctxTokens)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.Stdout, "loaded %s (%s), context %d tokens: %s\n", r.Model.Path, r.Model.Description, r.Capacity.ContextTokens, r.Capacity.Reason)
	return nil
}

func cmdUnload(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("unload", flag.ContinueOnError)
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	c, err := e.Dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.UnloadModel(ctx)
}
