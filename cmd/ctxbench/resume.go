package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/internal/clientconv"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/sidecar"
)

// resumeResult is what "bench resume" prints.
type resumeResult struct {
	Model            string  `json:"model"`
	KVType           string  `json:"kv_type"`
	FlashAttention   bool    `json:"flash_attention"`
	Mode             string  `json:"mode"` // dense or hot (hot budget)
	Tokens           int     `json:"tokens"`
	Text             string  `json:"text"`
	PrefillS         float64 `json:"prefill_s"`
	ResumeSSDS       float64 `json:"resume_ssd_s"`
	ResumeArenaS     float64 `json:"resume_arena_s"`
	SSDSpeedup       float64 `json:"ssd_speedup"`
	ArenaSpeedup     float64 `json:"arena_speedup"`
	RawBytes         int64   `json:"raw_bytes"`
	CompressedBytes  int64   `json:"compressed_bytes"`
	CompressionRatio float64 `json:"compressed_over_raw"`
	SaveS            float64 `json:"save_s"`
	PageCacheDropped bool    `json:"page_cache_dropped"`
	ContinuationSame bool    `json:"continuation_identical"`
	Continuation     []int32 `json:"continuation"`
	Restore          any     `json:"restore_report"`
}

// benchResume builds a session of --tokens tokens, then measures bringing
// it back: from host RAM (after another session took the engine) and from
// the SSD tier after a restart of the daemon, against prefilling it.
func benchResume(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("bench resume", flag.ContinueOnError)
	model := fs.String("model", defaultModel(), "GGUF model")
	tokens := fs.Int("tokens", 4096, "session length in tokens")
	hot := fs.Int("hot", -1, "hot budget (0: dense; -1: dense when the session fits the model's window, else 512)")
	kv := fs.String("kv", "f16", "KV type: f16, q8_0 (needs a head size that is a multiple of 32) or f32")
	gen := fs.Int("generate", 16, "greedy tokens compared before and after the resume")
	flashAttn := fs.Bool("flash-attn", false, "flash attention (always on with q8_0); its KV stores V token-major, which compresses better")
	seed := fs.Uint64("seed", 1, "seed of random token ids (without traces)")
	traces := fs.String("traces", envOr("CTXD_TRACES", "../shared/traces"), "session text: SWE-agent trajectories (random token ids when none)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	kvType, err := policy.ParseKVType(*kv)
	if err != nil {
		return cli.Usage(err)
	}
	dir, err := os.MkdirTemp("", "ctxd-bench-resume-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := sidecar.Config{ModelPath: *model, DataDir: filepath.Join(dir, "data"), SocketPath: filepath.Join(dir, "a.sock"),
		KVType: kvType, FlashAttention: *flashAttn || kvType == policy.KVTypeQ8_0, IdleSnapshot: -1, Version: "ctxbench"}
	cfg = withDevice(cfg)
	p, err := sidecar.StartPrivate(cfg)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			p.Stop()
		}
	}()
	c, err := client.Dial(ctx, p.Socket, client.Options{Name: "ctxbench bench"})
	if err != nil {
		return err
	}
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	window := int(st.Model.TrainedContext)
	res := resumeResult{Model: *model, KVType: kvType.String(), Tokens: *tokens, Mode: "dense", FlashAttention: cfg.FlashAttention}
	if *hot < 0 {
		*hot = 0
		if *tokens+*gen+8 > window {
			*hot = 512
		}
	}
	if *hot > 0 || *tokens+*gen+8 > int(st.Capacity.ContextTokens) {
		// Restart the private daemon with the hot set (or a context that holds the session).
		c.Close()
		p.Stop()
		if *hot > 0 {
			cfg.HotTokens = *hot
			res.Mode = fmt.Sprintf("hot %d", *hot)
		} else {
			cfg.ContextTokens = *tokens + *gen + 64
		}
		if p, err = sidecar.StartPrivate(cfg); err != nil {
			return err
		}
		if c, err = client.Dial(ctx, p.Socket, client.Options{Name: "ctxbench bench"}); err != nil {
			return err
		}
	}
	ids, err := corpus(*model, *traces, *tokens-1)
	if err != nil {
		// No trajectories: random token ids (they compress a little worse).
		vocab := int32(st.Model.VocabSize)
		rng := rand.New(rand.NewPCG(*seed, 7))
		ids = make([]int32, *tokens-1)
		for i := range ids {
			ids[i] = 3 + rng.Int32N(vocab-3)
		}
		res.Text = "random token ids"
	} else {
		res.Text = "trajectory text from " + *traces
	}
	m := policy.Manifest{Segments: []policy.Segment{{ID: "context", Kind: policy.KindRepoMap, Class: policy.ClassRepoMap, Stable: true, Tokens: ids}}}
	s, err := c.OpenSession(ctx, "bench-resume")
	if err != nil {
		return err
	}
	start := time.Now()
	pctx, done := e.CallProgress(ctx, "prefill")
	_, err = s.EnsurePrefix(pctx, clientconv.Manifest(m))
	done()
	if err != nil {
		return err
	}
	res.PrefillS = time.Since(start).Seconds()
	// From host RAM: another session takes the engine, then this one
	// comes back.
	other, err := c.OpenSession(ctx, "bench-other")
	if err != nil {
		return err
	}
	small := policy.Manifest{Segments: []policy.Segment{{ID: "x", Kind: policy.KindUserTurn, Stable: true, Tokens: ids[:16]}}}
	if _, err := other.EnsurePrefix(ctx, clientconv.Manifest(small)); err != nil {
		return err
	}
	start = time.Now()
	if _, err := s.EnsurePrefix(ctx, clientconv.Manifest(m)); err != nil {
		return err
	}
	res.ResumeArenaS = time.Since(start).Seconds()
	start = time.Now()
	snap, err := s.Snapshot(ctx, "bench-resume")
	if err != nil {
		return err
	}
	res.SaveS = time.Since(start).Seconds()
	res.RawBytes, res.CompressedBytes = snap.RawBytes, snap.CompressedBytes
	before, err := greedy(ctx, s, *gen)
	if err != nil {
		return err
	}
	c.Close()
	p.Stop()
	stopped = true
	// Restart: a new daemon on the same data directory.
	res.PageCacheDropped = dropPageCache(filepath.Join(cfg.DataDir, "cold"))
	cfg.SocketPath = filepath.Join(dir, "b.sock")
	if p, err = sidecar.StartPrivate(cfg); err != nil {
		return err
	}
	stopped = false
	if c, err = client.Dial(ctx, p.Socket, client.Options{Name: "ctxbench bench"}); err != nil {
		return err
	}
	defer c.Close()
	s2, _, err := c.OpenSessionOptions(ctx, client.SessionOptions{Name: "bench-restored", Cold: true})
	if err != nil {
		return err
	}
	start = time.Now()
	rep, err := s2.Restore(ctx, "bench-resume")
	if err != nil {
		return err
	}
	res.ResumeSSDS = time.Since(start).Seconds()
	res.Restore = rep
	after, err := greedy(ctx, s2, *gen)
	if err != nil {
		return err
	}
	res.Continuation = after
	res.ContinuationSame = slices.Equal(before, after)
	res.SSDSpeedup = res.PrefillS / res.ResumeSSDS
	res.ArenaSpeedup = res.PrefillS / res.ResumeArenaS
	if res.RawBytes > 0 {
		res.CompressionRatio = float64(res.CompressedBytes) / float64(res.RawBytes)
	}
	if *asJSON {
		return e.PrintJSON(res)
	}
	fmt.Fprintf(e.Stdout, "model %s, KV %s (flash attention %v), %s, %d tokens\n", filepath.Base(*model), res.KVType, res.FlashAttention, res.Mode, res.Tokens)
	fmt.Fprintf(e.Stdout, "prefill_s %.3f  resume_ssd_s %.4f (%.0f×)  resume_arena_s %.4f (%.0f×)\n",
		res.PrefillS, res.ResumeSSDS, res.SSDSpeedup, res.ResumeArenaS, res.ArenaSpeedup)
	fmt.Fprintf(e.Stdout, "raw_bytes %d  compressed_bytes %d  (%.3f of raw; save %.3f s; page cache dropped %v)\n",
		res.RawBytes, res.CompressedBytes, res.CompressionRatio, res.SaveS, res.PageCacheDropped)
	fmt.Fprintf(e.Stdout, "continuation identical after restart: %v %v\n", res.ContinuationSame, res.Continuation)
	return nil
}

func greedy(ctx context.Context, s *client.Session, n int) ([]int32, error) {
	var out []int32
	_, err := s.Decode(ctx, client.DecodeOptions{MaxTokens: n}, func(t client.Token) error {
		out = append(out, t.ID)
		return nil
	})
	return out, err
}

// dropPageCache asks the kernel to forget the cached pages of every file
// under dir, so the restore reads the SSD rather than RAM.
func dropPageCache(dir string) bool {
	ok := true
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			ok = false
			return nil
		}
		defer f.Close()
		if unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED) != nil {
			ok = false
		}
		return nil
	})
	return ok
}
