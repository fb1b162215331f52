package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/policy"
)

// bench engine: the vendored llama.cpp's own speed, llama-bench style —
// a prompt decoded in batches into a fresh context, then greedy single
// tokens — through engine/llama alone: no daemon, no hot set, no session.
// Against bench speed (the same work through the daemon) it separates
// ctxd's overhead from the kernels'; against upstream's llama-bench it
// shows what the vendored version costs. --flash-attn both measures off
// and on back to back, R times, alternating which goes first.

type engineRun struct {
	FlashAttn   bool    `json:"flash_attn"`
	Threads     int     `json:"threads"`
	PrefillTokS float64 `json:"prefill_tok_s"`
	DecodeMS    float64 `json:"decode_ms_per_token"`
}

func benchEngine(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("bench engine", flag.ContinueOnError)
	model := fs.String("model", defaultModel(), "GGUF model")
	prompt := fs.Int("prompt", 512, "prompt tokens (llama-bench -p)")
	gen := fs.Int("generate", 16, "single tokens decoded after the prompt (llama-bench -n)")
	batch := fs.Int("batch", engine.DefaultBatchTokens, "batch size (llama-bench -b/-ub)")
	threads := fs.Int("threads", 0, "CPU threads, pinned (0: auto, every core other processes leave free, as ctxd does)")
	flash := fs.String("flash-attn", "off", "off, on or both (both: off and on back to back)")
	kv := fs.String("kv", "f16", "KV type: f16 or q8_0 (q8_0 needs flash attention)")
	reps := fs.Int("reps", 1, "repetitions of each setting")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	kvType, err := policy.ParseKVType(*kv)
	if err != nil {
		return cli.Usage(err)
	}
	var settings []bool
	switch *flash {
	case "off":
		settings = []bool{false}
	case "on":
		settings = []bool{true}
	case "both":
		settings = []bool{false, true}
	default:
		return cli.Usage(fmt.Errorf("--flash-attn %q: want off, on or both", *flash))
	}
	if *prompt < 1 || *gen < 0 || *batch < 1 || *reps < 1 || *threads < 0 {
		return cli.Usage(errors.New("--prompt, --batch and --reps must be positive; --generate and --threads not negative"))
	}
	m, err := llama.Backend{}.Load(ctx, *model, engine.ModelOptions{})
	if err != nil {
		return err
	}
	defer m.Close()
	toks := make([]engine.Token, *prompt)
	for i := range toks {
		toks[i] = engine.Token(3 + i%250)
	}
	var runs []engineRun
	bar := e.NewProgress("engine runs", int64(*reps*len(settings)), "")
	for r := range *reps {
		order := settings
		if r%2 == 1 && len(settings) == 2 {
			order = []bool{true, false}
		}
		for _, fa := range order {
			run, err := engineOnce(ctx, m, toks, *gen, *batch, *threads, fa, kvType)
			if err != nil {
				bar.Clear()
				return fmt.Errorf("flash attention %v: %w", fa, err)
			}
			runs = append(runs, run)
			bar.Add(1)
		}
	}
	bar.Clear()
	if *asJSON {
		return e.PrintJSON(runs)
	}
	fmt.Fprintf(e.Stdout, "engine alone: %s, prompt %d in batches of %d, %d decoded, KV %s\n", *model, *prompt, *batch, *gen, kvType)
	for _, r := range runs {
		fmt.Fprintf(e.Stdout, "flash-attn %-5v threads %d: prefill %8.1f tok/s, decode %8.2f ms/token\n", r.FlashAttn, r.Threads, r.PrefillTokS, r.DecodeMS)
	}
	if len(settings) == 2 {
		var p, d [2][]float64
		for _, r := range runs {
			i := 0
			if r.FlashAttn {
				i = 1
			}
			p[i], d[i] = append(p[i], r.PrefillTokS), append(d[i], r.DecodeMS)
		}
		fmt.Fprintf(e.Stdout, "flash attention on / off (medians): prefill time %.2f×, decode time %.2f×\n",
			median(p[0])/median(p[1]), median(d[1])/median(d[0]))
	}
	return nil
}

// engineOnce decodes toks into a fresh context, then gen greedy tokens.
func engineOnce(ctx context.Context, m engine.Model, toks []engine.Token, gen, batch, threads int, fa bool, kv policy.KVType) (engineRun, error) {
	o := engine.ContextOptions{ContextTokens: len(toks) + gen + 8, BatchTokens: batch, KVType: kv, FlashAttention: fa, Threads: threads, DecodeThreads: threads, ThreadsPinned: threads > 0}
	c, err := m.NewContext(o)
	if err != nil {
		return engineRun{}, err
	}
	defer c.Close()
	t0 := time.Now()
	if err := c.Decode(ctx, toks, 0); err != nil {
		return engineRun{}, err
	}
	run := engineRun{FlashAttn: fa, PrefillTokS: float64(len(toks)) / time.Since(t0).Seconds()}
	if gen > 0 {
		s, err := c.NewSampler(engine.SamplingParams{})
		if err != nil {
			return engineRun{}, err
		}
		defer s.Close()
		t0 = time.Now()
		for i := range gen {
			if err := c.Decode(ctx, []engine.Token{c.Sample(s)}, len(toks)+i); err != nil {
				return engineRun{}, err
			}
		}
		run.DecodeMS = float64(time.Since(t0).Microseconds()) / 1000 / float64(gen)
	}
	if t, ok := c.(interface{ Threads() int }); ok {
		run.Threads = t.Threads()
	}
	return run, nil
}
