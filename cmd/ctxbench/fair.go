package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/internal/clientconv"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/sidecar"
)

// benchFair measures fair scheduling: the short turns of many clients,
// first alone, then while one client streams a long decode, and how fast
// Status answers throughout. One run prints the ratios.
func benchFair(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("bench fair", flag.ContinueOnError)
	model := fs.String("model", defaultModel(), "model for the private daemon")
	ctxTokens := fs.Int("ctx", 8192, "context tokens (the long decode must fit)")
	hot := fs.Int("hot", 0, "hot-set budget (0: dense)")
	threads := fs.Int("threads", 1, "engine threads, pinned (0: auto, every core other processes leave free)")
	clients := fs.Int("clients", 16, "clients taking short turns")
	turns := fs.Int("turns", 12, "short turns per client in the baseline")
	longTokens := fs.Int("long-tokens", 4000, "tokens of the long decode")
	shortTokens := fs.Int("short-tokens", 8, "tokens decoded per short turn")
	longPrefill := fs.Int("long-prefill-bytes", 0, "instead of the long decode, the long call prefills a prompt of this many bytes of text (e.g. 2000000: a 2 MB prompt; use a hot set)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	p, err := sidecar.StartPrivate(sidecar.Config{Engine: llama.Backend{}, ModelPath: *model, ContextTokens: *ctxTokens, HotTokens: *hot, Threads: *threads, Version: "ctxbench-private", NoCold: true})
	if err != nil {
		return err
	}
	defer p.Stop()
	dial := func() (*client.Client, error) { return client.Dial(ctx, p.Socket) }

	// The short-turn clients: each its own connection and session; a turn
	// is EnsurePrefix, PrefillSuffix with a new user turn, and a short
	// greedy decode.
	type shortClient struct {
		c *client.Client
		s *client.Session
		m policy.Manifest
		n int
	}
	var shorts []*shortClient
	for i := range *clients {
		c, err := dial()
		if err != nil {
			return err
		}
		defer c.Close()
		s, err := c.OpenSession(ctx, fmt.Sprintf("short-%d", i))
		if err != nil {
			return err
		}
		m := policy.Manifest{Segments: []policy.Segment{
			{ID: "system", Kind: policy.KindSystem, Stable: true, Text: fmt.Sprintf("Once upon a time, agent %d helped a girl named Lily.", i)},
		}}
		shorts = append(shorts, &shortClient{c: c, s: s, m: m})
	}
	turn := func(sc *shortClient) (time.Duration, error) {
		sc.n++
		t0 := time.Now()
		if _, err := sc.s.EnsurePrefix(ctx, clientconv.Manifest(sc.m)); err != nil {
			return 0, err
		}
		if _, err := sc.s.PrefillSuffix(ctx, client.Segment{ID: fmt.Sprintf("turn%d", sc.n), Kind: client.KindUserTurn, Text: fmt.Sprintf(" On day %d, the dog ran.", sc.n)}); err != nil {
			return 0, err
		}
		if _, err := sc.s.Decode(ctx, client.DecodeOptions{MaxTokens: *shortTokens}, nil); err != nil {
			return 0, err
		}
		return time.Since(t0), nil
	}
	// runShorts runs every client's turns until stop says so; it returns
	// every turn's latency.
	runShorts := func(stop func(done int) bool) ([]time.Duration, error) {
		var mu sync.Mutex
		var lat []time.Duration
		var firstErr error
		var wg sync.WaitGroup
		for _, sc := range shorts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for done := 0; !stop(done); done++ {
					d, err := turn(sc)
					mu.Lock()
					if err != nil && firstErr == nil {
						firstErr = err
					}
					lat = append(lat, d)
					mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
		}
		wg.Wait()
		return lat, firstErr
	}
	// Status latency is sampled every 10 ms on its own connection.
	sampleStatus := func(stop <-chan struct{}) ([]time.Duration, error) {
		c, err := dial()
		if err != nil {
			return nil, err
		}
		defer c.Close()
		var lat []time.Duration
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return lat, nil
			case <-t.C:
			}
			t0 := time.Now()
			if _, err := c.Status(ctx); err != nil {
				return lat, err
			}
			lat = append(lat, time.Since(t0))
		}
	}
	// The long decode: forced random tokens, so it runs its full length
	// (end of generation cannot cut it short) through the normal path.
	lc, err := dial()
	if err != nil {
		return err
	}
	defer lc.Close()
	ls, err := lc.OpenSession(ctx, "long")
	if err != nil {
		return err
	}
	forced := make([]int32, *longTokens)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range forced {
		forced[i] = 3 + rng.Int32N(400)
	}
	runs := 0
	longPrefillCall := func() (time.Duration, error) {
		// A fresh text each run (its first words differ), so nothing is
		// reused from the run before.
		runs++
		var text strings.Builder
		fmt.Fprintf(&text, "Run %d. ", runs)
		words := strings.Fields("once upon a time there was a little girl named lily she liked to play in the park with her friend tom")
		for i := 0; text.Len() < *longPrefill; i++ {
			text.WriteString(words[(i*7+runs)%len(words)])
			text.WriteByte(' ')
		}
		lm := policy.Manifest{Segments: []policy.Segment{{ID: fmt.Sprintf("p%d", runs), Kind: policy.KindTerminal, Stable: true, Text: text.String()}}}
		t0 := time.Now()
		_, err := ls.EnsurePrefix(ctx, clientconv.Manifest(lm))
		return time.Since(t0), err
	}
	longDecode := func() (time.Duration, error) {
		if *longPrefill > 0 {
			return longPrefillCall()
		}
		lm := policy.Manifest{Segments: []policy.Segment{{ID: "p", Kind: policy.KindUserTurn, Stable: true, Text: "Once upon a time"}}}
		if _, err := ls.EnsurePrefix(ctx, clientconv.Manifest(lm)); err != nil {
			return 0, err
		}
		t0 := time.Now()
		_, err := ls.Decode(ctx, client.DecodeOptions{MaxTokens: len(forced), Forced: forced}, func(client.Token) error { return nil })
		return time.Since(t0), err
	}

	phase := func(what string) { fmt.Fprintf(e.Stderr, "bench fair: %s\n", what) }
	// 1. The long decode alone.
	phase("the long decode alone")
	alone, err := longDecode()
	if err != nil {
		return fmt.Errorf("long decode alone: %w", err)
	}
	phase(fmt.Sprintf("%.2f s; the short turns alone", alone.Seconds()))
	// 2. The short turns alone (one warm-up round first), with Status sampled.
	if _, err := runShorts(func(done int) bool { return done >= 1 }); err != nil {
		return err
	}
	stop := make(chan struct{})
	var statusBase []time.Duration
	var statusErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); statusBase, statusErr = sampleStatus(stop) }()
	base, err := runShorts(func(done int) bool { return done >= *turns })
	close(stop)
	wg.Wait()
	if err == nil {
		err = statusErr
	}
	if err != nil {
		return fmt.Errorf("short turns alone: %w", err)
	}
	phase(fmt.Sprintf("%d turns; the short turns beside the long decode", len(base)))
	// 3. The short turns while the long decode streams, Status sampled.
	var longDone atomic.Bool
	var together time.Duration
	var longErr error
	stop = make(chan struct{})
	var statusLong []time.Duration
	wg.Add(2)
	go func() { defer wg.Done(); statusLong, statusErr = sampleStatus(stop) }()
	go func() {
		defer wg.Done()
		together, longErr = longDecode()
		longDone.Store(true)
	}()
	time.Sleep(20 * time.Millisecond) // the long decode is streaming
	during, err := runShorts(func(done int) bool { return longDone.Load() && done >= 1 })
	for !longDone.Load() {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	for _, e := range []error{err, longErr, statusErr} {
		if e != nil {
			return fmt.Errorf("with the long decode: %w", e)
		}
	}

	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	q := func(d []time.Duration, p float64) time.Duration {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[int(float64(len(s)-1)*p)]
	}
	out := struct {
		Clients           int     `json:"clients"`
		LongTokens        int     `json:"long_tokens"`
		LongPrefillBytes  int     `json:"long_prefill_bytes,omitempty"`
		BaseTurns         int     `json:"base_turns"`
		DuringTurns       int     `json:"during_turns"`
		BaseP50ms         float64 `json:"base_p50_ms"`
		BaseP99ms         float64 `json:"base_p99_ms"`
		DuringP50ms       float64 `json:"during_p50_ms"`
		DuringP99ms       float64 `json:"during_p99_ms"`
		P99Ratio          float64 `json:"p99_ratio"`
		StatusBaseMaxMs   float64 `json:"status_base_max_ms"`
		StatusDuringP99ms float64 `json:"status_during_p99_ms"`
		StatusDuringMaxMs float64 `json:"status_during_max_ms"`
		LongAloneS        float64 `json:"long_alone_s"`
		LongTogetherS     float64 `json:"long_together_s"`
	}{
		Clients: *clients, LongTokens: *longTokens, LongPrefillBytes: *longPrefill, BaseTurns: len(base), DuringTurns: len(during),
		BaseP50ms: ms(q(base, 0.5)), BaseP99ms: ms(q(base, 0.99)), DuringP50ms: ms(q(during, 0.5)), DuringP99ms: ms(q(during, 0.99)),
		StatusBaseMaxMs: ms(q(statusBase, 1)), StatusDuringP99ms: ms(q(statusLong, 0.99)), StatusDuringMaxMs: ms(q(statusLong, 1)),
		LongAloneS: alone.Seconds(), LongTogetherS: together.Seconds(),
	}
	out.P99Ratio = out.DuringP99ms / max(out.BaseP99ms, 1e-9)
	if *asJSON {
		return e.PrintJSON(out)
	}
	long := fmt.Sprintf("%d-token decode", out.LongTokens)
	if *longPrefill > 0 {
		long = fmt.Sprintf("%d-byte prefill", *longPrefill)
	}
	fmt.Fprintf(e.Stdout, "short turns (%d clients): alone p50 %.1f ms p99 %.1f ms (%d turns); beside a %s p50 %.1f ms (ratio %.2f) p99 %.1f ms (%d turns): p99 ratio %.2f (target <= 3)\n",
		out.Clients, out.BaseP50ms, out.BaseP99ms, out.BaseTurns, long, out.DuringP50ms, out.DuringP50ms/max(out.BaseP50ms, 1e-9), out.DuringP99ms, out.DuringTurns, out.P99Ratio)
	fmt.Fprintf(e.Stdout, "status: max %.2f ms alone; beside the decode p99 %.2f ms, max %.2f ms (target <= 100 ms)\n", out.StatusBaseMaxMs, out.StatusDuringP99ms, out.StatusDuringMaxMs)
	fmt.Fprintf(e.Stdout, "long decode: %.2f s alone, %.2f s beside the short turns (ratio %.2f)\n", out.LongAloneS, out.LongTogetherS, out.LongTogetherS/max(out.LongAloneS, 1e-9))
	return nil
}
