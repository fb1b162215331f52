package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/internal/clientconv"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/sidecar"
)

// withDevice fills where a private daemon runs the model from the
// environment ctxd reads too: CTXD_BACKEND_DIR (default: the backends
// folder beside this binary), CTXD_DEVICE and CTXD_GPU_LAYERS; and the
// engine, llama.cpp, when unset.
func withDevice(cfg sidecar.Config) sidecar.Config {
	if cfg.Engine == nil {
		cfg.Engine = llama.Backend{}
	}
	if cfg.BackendDir == "" {
		cfg.BackendDir = os.Getenv("CTXD_BACKEND_DIR")
		if cfg.BackendDir == "" {
			if exe, err := os.Executable(); err == nil {
				cfg.BackendDir = filepath.Join(filepath.Dir(exe), "backends")
			}
		}
	}
	if cfg.Device == "" {
		cfg.Device = os.Getenv("CTXD_DEVICE")
	}
	if n, err := strconv.Atoi(os.Getenv("CTXD_GPU_LAYERS")); err == nil && cfg.GPULayers == 0 && n > 0 {
		cfg.GPULayers = n
	}
	return cfg
}

// speedResult is one device's line of "bench speed".
type speedResult struct {
	Device        string  `json:"device"` // "" = the CPU
	Backend       string  `json:"backend"`
	GPULayers     int32   `json:"gpu_layers"`
	Layers        int32   `json:"layers"`
	Threads       int32   `json:"threads"`
	PromptTokens  int     `json:"prompt_tokens"`
	PrefillTokS   float64 `json:"prefill_tokens_per_s"`
	DecodeTokens  int     `json:"decode_tokens"`
	DecodeTokS    float64 `json:"decode_tokens_per_s"`
	WarmTokens    int     `json:"warm_tokens,omitempty"`
	WarmS         float64 `json:"warm_turn_s,omitempty"`
	DeviceWeights int64   `json:"device_weights_bytes"`
	DeviceKV      int64   `json:"device_kv_bytes"`
}

// benchSpeed measures prefill and decode throughput of a model on each
// device asked for (by default the CPU, then the GPU when one is found).
func benchSpeed(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("bench speed", flag.ContinueOnError)
	model := fs.String("model", defaultModel(), "GGUF model")
	prompt := fs.Int("prompt", 512, "prompt tokens prefilled")
	gen := fs.Int("generate", 32, "greedy tokens decoded")
	warm := fs.Int("warm", 0, "then a warm turn: this many new tokens after the prompt (the decoded ones are dropped), timed with its first decoded token")
	devices := fs.String("devices", "cpu,auto", "comma-separated --device values to compare (auto: the GPU with the most free memory)")
	flashAttn := fs.Bool("flash-attn", false, "flash attention")
	kv := fs.String("kv", "f16", "KV type: f16, q8_0 (needs flash attention) or f32")
	asJSON := fs.Bool("json", false, "print JSON")
	threads := fs.Int("threads", policy.ThreadsAuto, "CPU threads: 0 adapts each call to the free cores (ctxd's default), N pins N")
	busyReps := fs.Int("beside-busy", 0, "instead: this many rounds on the CPU of alone, then beside one busy process (a shell loop), each in a fresh daemon; prints each round's ratio busy/alone")
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	if *threads < 0 {
		return cli.Usage(fmt.Errorf("--threads %d: want 0 (auto) or a count", *threads))
	}
	kvType, err := policy.ParseKVType(*kv)
	if err != nil {
		return cli.Usage(err)
	}
	if *prompt <= 0 || *gen <= 0 || *warm < 0 {
		return cli.Usage(fmt.Errorf("--prompt and --generate must be positive, --warm not negative"))
	}
	toks := make([]int32, *prompt+*warm)
	for i := range toks {
		toks[i] = int32(3 + i%250)
	}
	if *busyReps > 0 {
		cfg := withDevice(sidecar.Config{ModelPath: *model, ContextTokens: *prompt + *warm + *gen + 64, NoCold: true,
			KVType: kvType, FlashAttention: *flashAttn || kvType == policy.KVTypeQ8_0, Device: "cpu", Threads: *threads, Version: "ctxbench"})
		return besideBusy(ctx, e, cfg, toks[:*prompt], toks[*prompt:], *gen, *busyReps)
	}
	var out []speedResult
	for _, d := range strings.Split(*devices, ",") {
		if d == "auto" {
			d = ""
		}
		cfg := withDevice(sidecar.Config{ModelPath: *model, ContextTokens: *prompt + *warm + *gen + 64, NoCold: true,
			KVType: kvType, FlashAttention: *flashAttn || kvType == policy.KVTypeQ8_0, Device: d, Threads: *threads, Version: "ctxbench"})
		r, err := speedOn(ctx, cfg, toks[:*prompt], toks[*prompt:], *gen)
		if err != nil {
			return fmt.Errorf("device %q: %w", d, err)
		}
		if d == "" && r.Device == "" {
			fmt.Fprintln(e.Stderr, "bench speed: no GPU device found; only the CPU was measured")
			if len(out) > 0 && out[len(out)-1].Device == "" {
				continue
			}
		}
		out = append(out, r)
	}
	if *asJSON {
		return json.NewEncoder(e.Stdout).Encode(out)
	}
	fmt.Fprintf(e.Stdout, "model %s, prompt %d tokens, %d decoded, KV %s\n", filepath.Base(*model), *prompt, *gen, kvType)
	for _, r := range out {
		where := "CPU"
		if r.Device != "" {
			where = fmt.Sprintf("%s (%s, %d/%d layers)", r.Device, r.Backend, r.GPULayers, r.Layers)
		}
		warmTurn := ""
		if r.WarmTokens > 0 {
			warmTurn = fmt.Sprintf("   warm turn of %d tokens %.2f s", r.WarmTokens, r.WarmS)
		}
		fmt.Fprintf(e.Stdout, "%-36s prefill %9.1f tok/s   decode %8.1f tok/s%s   threads %d\n", where, r.PrefillTokS, r.DecodeTokS, warmTurn, r.Threads)
	}
	if len(out) == 2 && out[0].PrefillTokS > 0 && out[0].DecodeTokS > 0 {
		fmt.Fprintf(e.Stdout, "ratio %s/%s: prefill %.3gx, decode %.3gx\n", nameOr(out[1].Device), nameOr(out[0].Device),
			out[1].PrefillTokS/out[0].PrefillTokS, out[1].DecodeTokS/out[0].DecodeTokS)
	}
	return nil
}

func nameOr(d string) string {
	if d == "" {
		return "CPU"
	}
	return d
}

// speedOn prefills toks cold, decodes gen tokens, and, when warm is not
// empty, times a warm turn: the prompt again with warm appended (the
// decoded tokens dropped), up to its first decoded token.
func speedOn(ctx context.Context, cfg sidecar.Config, toks, warm []int32, gen int) (speedResult, error) {
	c, done, err := privateClient(ctx, cfg)
	if err != nil {
		return speedResult{}, err
	}
	defer done()
	s, err := c.OpenSession(ctx, "speed")
	if err != nil {
		return speedResult{}, err
	}
	defer s.Close(ctx)
	m := policy.Manifest{Segments: []policy.Segment{{ID: "prompt", Kind: policy.KindTerminal, Tokens: toks, Stable: true}}}
	t0 := time.Now()
	if _, err := s.EnsurePrefix(ctx, clientconv.Manifest(m)); err != nil {
		return speedResult{}, err
	}
	prefill := time.Since(t0)
	t0 = time.Now()
	if _, err := s.Decode(ctx, client.DecodeOptions{MaxTokens: gen, NoStream: true}, nil); err != nil {
		return speedResult{}, err
	}
	decode := time.Since(t0)
	var warmTurn time.Duration
	if len(warm) > 0 {
		m.Segments = append(m.Segments, policy.Segment{ID: "turn", Kind: policy.KindUserTurn, Tokens: warm, Stable: true})
		t0 = time.Now()
		if _, err := s.EnsurePrefix(ctx, clientconv.Manifest(m)); err != nil {
			return speedResult{}, err
		}
		if _, err := s.Decode(ctx, client.DecodeOptions{MaxTokens: 1, NoStream: true}, nil); err != nil {
			return speedResult{}, err
		}
		warmTurn = time.Since(t0)
	}
	st, err := c.Status(ctx)
	if err != nil {
		return speedResult{}, err
	}
	var d client.DeviceInfo
	if st.Device != nil {
		d = *st.Device
	}
	return speedResult{
		Device: d.Name, Backend: d.Backend, GPULayers: int32(d.GPULayers), Layers: int32(d.Layers), Threads: int32(d.Threads),
		PromptTokens: len(toks), PrefillTokS: float64(len(toks)) / prefill.Seconds(),
		DecodeTokens: gen, DecodeTokS: float64(gen) / decode.Seconds(),
		WarmTokens: len(warm), WarmS: warmTurn.Seconds(),
		DeviceWeights: d.WeightsBytes, DeviceKV: d.KVBytes,
	}, nil
}
