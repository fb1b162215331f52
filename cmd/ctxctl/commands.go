package main

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"text/tabwriter"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/policy"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

func cmdStatus(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	st, err := query(ctx, e, fs, args, func(c *client.Client) (*pb.StatusReply, error) { return c.Status(ctx) })
	if err != nil {
		return err
	}
	if *asJSON {
		return e.printJSON(st)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "server\t%s (up %.1fs)\n", st.GetServerVersion(), float64(st.GetUptimeMs())/1000)
	fmt.Fprintf(w, "sessions\t%d\n", st.GetSessions())
	if m := st.GetModel(); m != nil {
		fmt.Fprintf(w, "model\t%s\n", m.GetPath())
		fmt.Fprintf(w, "  digest\t%s\n", m.GetDigest())
		fmt.Fprintf(w, "  shape\t%s: %d layers, %d KV heads × %d, trained context %d, vocab %d\n",
			m.GetDescription(), m.GetLayers(), m.GetKvHeads(), m.GetHeadDim(), m.GetTrainedContext(), m.GetVocabSize())
	} else {
		fmt.Fprintf(w, "model\tnone loaded\n")
	}
	if cp := st.GetCapacity(); cp != nil {
		fmt.Fprintf(w, "kv\t%s, %d bytes/token, flash attention %v\n", st.GetKvType(), cp.GetKvBytesPerToken(), st.GetFlashAttention())
		fmt.Fprintf(w, "context\t%d tokens (effective %d; %s)\n", cp.GetContextTokens(), cp.GetEffectiveTokens(), cp.GetReason())
		fmt.Fprintf(w, "memory\t%s: %.1f GiB usable, weights %.1f MiB, overhead %.1f MiB\n", cp.GetMemoryKind(),
			float64(cp.GetUsableBytes())/(1<<30), float64(cp.GetWeightsBytes())/(1<<20), float64(cp.GetOverheadBytes())/(1<<20))
	}
	if d := st.GetDevice(); d != nil {
		if d.GetName() == "" {
			fmt.Fprintf(w, "device\tCPU: all %d layers and the KV in host memory (%s)\n", d.GetLayers(), d.GetReason())
		} else {
			fmt.Fprintf(w, "device\t%s (%s, %s): %d of %d layers, output head %v; %.1f of %.1f GiB free at load\n",
				d.GetName(), d.GetBackend(), d.GetDescription(), d.GetGpuLayers(), d.GetLayers(), d.GetOutputOnDevice(),
				float64(d.GetFreeBytes())/(1<<30), float64(d.GetTotalBytes())/(1<<30))
			fmt.Fprintf(w, "  device memory\tweights %.1f MiB, KV %.1f MiB, compute %.1f MiB; host: weights %.1f MiB, KV %.1f MiB\n",
				mib(d.GetWeightsBytes()), mib(d.GetKvBytes()), mib(d.GetComputeBytes()), mib(d.GetHostWeightsBytes()), mib(d.GetHostKvBytes()))
			fmt.Fprintf(w, "  placement\t%s\n", d.GetReason())
		}
		fmt.Fprintf(w, "  cpu threads\t%d in the last decode call\n", d.GetThreads())
	}
	if cp := st.GetCapacity(); cp.GetHotTokens() > 0 {
		fmt.Fprintf(w, "hot set\t%d tokens below window %d; arena %.1f MiB = %d tokens; sessions up to %d tokens\n",
			cp.GetHotTokens(), cp.GetWindowTokens(), float64(cp.GetArenaBytes())/(1<<20), cp.GetArenaTokens(), cp.GetSessionTokens())
	}
	if cs := st.GetCold(); cs.GetEnabled() {
		fmt.Fprintf(w, "ssd tier\t%s: %d blocks, %.1f MiB (%.1f MiB raw) of quota %.1f MiB, %d snapshots\n", cs.GetDir(), cs.GetBlocks(),
			mib(cs.GetBytes()), mib(cs.GetRawBytes()), mib(cs.GetQuotaBytes()), cs.GetSnapshots())
		if u := cs.GetUnavailable(); u != "" {
			fmt.Fprintf(w, "  standing aside\t%s\n", u)
		}
	} else {
		fmt.Fprintf(w, "ssd tier\toff: %s\n", cs.GetUnavailable())
	}
	fmt.Fprintf(w, "engine\t%s\n", st.GetSystemInfo())
	return w.Flush()
}

func cmdExplain(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	id := fs.Uint64("session", 0, "session id (0: the most recently used)")
	asJSON := fs.Bool("json", false, "print JSON")
	png := fs.String("png", "", "also draw the context as a PNG file: segments, classes, hot, parked, retrieved")
	if err := parse(fs, e, args); err != nil {
		return err
	}
	c, err := e.dial(ctx)
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
		fmt.Fprintf(e.stderr, "picture: %s\n", *png)
	}
	if *asJSON {
		return e.printJSON(ex)
	}
	fmt.Fprintf(e.stdout, "session %d: %d tokens resident (%d generated), compat %s\n", ex.GetSessionId(), ex.GetResidentTokens(), ex.GetGeneratedTokens(), ex.GetCompatKey())
	if cp := ex.GetCapacity(); cp != nil {
		fmt.Fprintf(e.stdout, "context %d tokens, %d bytes/token; %s\n", cp.GetContextTokens(), cp.GetKvBytesPerToken(), cp.GetReason())
	}
	if ex.GetHotTokens() > 0 || ex.GetParkedBlocks() > 0 {
		fmt.Fprintf(e.stdout, "hot set: %d tokens hot, %d parked (%d blocks hot, %d parked, %d lost); protected %d, retrieved %d; %d evictions, %d admissions\n",
			ex.GetHotTokens(), ex.GetParkedTokens(), ex.GetHotBlocks(), ex.GetParkedBlocks(), ex.GetLostBlocks(),
			ex.GetProtectedTokens(), ex.GetRetrievedTokens(), ex.GetEvictions(), ex.GetAdmissions())
		for _, b := range ex.GetRetrieved() {
			fmt.Fprintf(e.stdout, "  retrieved block %d: tokens %d..%d, %s\n", b.GetBlockId(), b.GetFirstToken(), b.GetFirstToken()+b.GetTokens(), b.GetReason())
		}
		if lr := ex.GetLastRetrieval(); lr != nil {
			fmt.Fprintf(e.stdout, "  last retrieval (turn %d, %s): query %d tokens, room %d tokens\n", lr.GetTurn(), lr.GetScorers(), lr.GetQueryTokens(), lr.GetBudgetTokens())
			for _, sr := range lr.GetScorer() {
				fmt.Fprintf(e.stdout, "    %s: %d blocks scored in %.2f ms, summaries %d bytes\n", sr.GetName(), sr.GetBlocks(), float64(sr.GetScoringUs())/1000, sr.GetSummaryBytes())
				for _, c := range sr.GetTop() {
					mark := ""
					if c.GetAdmitted() {
						mark = "  admitted"
					}
					fmt.Fprintf(e.stdout, "      #%d block %d: tokens %d..%d, score %.4g%s\n", c.GetRank(), c.GetBlockId(), c.GetFirstToken(), c.GetFirstToken()+c.GetTokens(), c.GetScore(), mark)
				}
			}
		}
		for _, d := range ex.GetDiagnostics() {
			fmt.Fprintf(e.stdout, "  note: %s\n", d)
		}
	}
	classes := make([]string, 0, len(ex.GetTokensByClass()))
	for k := range ex.GetTokensByClass() {
		classes = append(classes, k)
	}
	sort.Strings(classes)
	for _, k := range classes {
		fmt.Fprintf(e.stdout, "  %-12s %d tokens\n", k, ex.GetTokensByClass()[k])
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "segment\tkind\tclass\tstable\tfirst\ttokens\tin engine")
	for _, s := range ex.GetSegments() {
		kind := policy.SegmentKind(s.GetKind()).String()
		fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%d\t%d\t%d\n", s.GetId(), kind, policy.CacheClass(s.GetClass()).String(), s.GetStable(), s.GetFirstPosition(), s.GetTokens(), s.GetResidentTokens())
	}
	return w.Flush()
}

func cmdGenerate(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	prompt := fs.String("prompt", "", "prompt text")
	maxTokens := fs.Int("max-tokens", 64, "tokens to generate")
	temp := fs.Float64("temperature", 0, "sampling temperature (0: greedy)")
	topK := fs.Int("top-k", 40, "top-k (with temperature)")
	topP := fs.Float64("top-p", 0.95, "top-p (with temperature)")
	seed := fs.Uint64("seed", 1, "sampling seed")
	stop := fs.String("stop", "", "stop string")
	if err := parse(fs, e, args); err != nil {
		return err
	}
	if *prompt == "" {
		return usageError{fmt.Errorf("--prompt is required")}
	}
	c, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.OpenSession(ctx, "ctxctl generate")
	if err != nil {
		return err
	}
	m := policy.Manifest{Segments: []policy.Segment{{ID: "prompt", Kind: policy.KindUserTurn, Text: *prompt}}}
	pctx, done := e.callProgress(ctx, "prefill")
	_, err = s.EnsurePrefix(pctx, m)
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
	fmt.Fprint(e.stdout, *prompt)
	res, err := s.Decode(ctx, o, func(t client.Token) error {
		_, err := fmt.Fprint(e.stdout, t.Piece)
		return err
	})
	fmt.Fprintln(e.stdout)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "[%d tokens, %s, %s]\n", res.Tokens, res.Reason, res.Elapsed.Round(1e5))
	return s.Close(ctx)
}

func cmdLoad(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	model := fs.String("model", "", "GGUF file (a path on the daemon's machine)")
	ctxTokens := fs.Int("ctx", 0, "context tokens (0: derived)")
	if err := parse(fs, e, args); err != nil {
		return err
	}
	if *model == "" {
		return usageError{fmt.Errorf("--model is required")}
	}
	c, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	r, err := c.LoadModel(ctx, *model, *ctxTokens)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "loaded %s (%s), context %d tokens: %s\n", r.GetModel().GetPath(), r.GetModel().GetDescription(), r.GetCapacity().GetContextTokens(), r.GetCapacity().GetReason())
	return nil
}

func cmdUnload(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("unload", flag.ContinueOnError)
	if err := parse(fs, e, args); err != nil {
		return err
	}
	c, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.UnloadModel(ctx)
}
