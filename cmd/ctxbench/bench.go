package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/internal/clientconv"
	"github.com/ctxd/ctxd/internal/replay"
	"github.com/ctxd/ctxd/internal/trace"
	"github.com/ctxd/ctxd/policy"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar"
)

func cmdBench(ctx context.Context, e *cli.Env, args []string) error {
	if len(args) == 0 {
		return cli.Usage(fmt.Errorf("which benchmark? replay, socket, resume, crash, trace, fair, speed, http, peer or engine"))
	}
	switch args[0] {
	case "replay":
		return benchReplay(ctx, e, args[1:])
	case "socket":
		return benchSocket(ctx, e, args[1:])
	case "resume":
		return benchResume(ctx, e, args[1:])
	case "crash":
		return benchCrash(ctx, e, args[1:])
	case "trace":
		return benchTrace(ctx, e, args[1:])
	case "fair":
		return benchFair(ctx, e, args[1:])
	case "speed":
		return benchSpeed(ctx, e, args[1:])
	case "http":
		return benchHTTP(ctx, e, args[1:])
	case "peer":
		return benchPeer(ctx, e, args[1:])
	case "engine":
		return benchEngine(ctx, e, args[1:])
	}
	return cli.Usage(fmt.Errorf("unknown benchmark %q (replay, socket, resume, crash, trace, fair, speed, http, peer, engine)", args[0]))
}

func defaultModel() string {
	if m := os.Getenv("CTXD_MODEL"); m != "" {
		return m
	}
	return "../shared/models/stories260K.gguf"
}

// benchReplay replays every trace of a folder with --verify-cold and
// prints each summary plus the totals over all traces.
func benchReplay(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("bench replay", flag.ContinueOnError)
	traces := fs.String("traces", envOr("CTXD_TRACES", "../shared/traces"), "folder of .traj files")
	model := fs.String("model", defaultModel(), "model for the private daemon")
	ctxTokens := fs.Int("ctx", 4096, "context tokens (dense attention: keep ≤ 8k on CPUs)")
	decodeTokens := fs.Int("decode-tokens", 4, "greedy tokens per turn")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	files, _ := filepath.Glob(filepath.Join(*traces, "*.traj"))
	if len(files) == 0 {
		return fmt.Errorf("no .traj files in %s", *traces)
	}
	sort.Strings(files)
	c, done, err := connect(ctx, e, *model, *ctxTokens)
	if err != nil {
		return err
	}
	defer done()
	type result struct {
		Trace   string         `json:"trace"`
		Summary replay.Summary `json:"summary"`
	}
	var out struct {
		Model   string   `json:"model"`
		Context int      `json:"context_tokens"`
		Traces  []result `json:"traces"`
		Total   struct {
			Turns         int     `json:"turns"`
			ReuseRatio    float64 `json:"reuse_ratio"`
			PromptReuse   float64 `json:"prompt_reuse"`
			WarmColdRatio float64 `json:"warm_cold_ratio"`
			WarmColdBound float64 `json:"warm_cold_bound"`
			ColdMatchAll  bool    `json:"cold_match_all"`
			MaxLogitDiff  float64 `json:"max_logit_diff"`
		} `json:"total"`
	}
	out.Model, out.Context = *model, *ctxTokens
	var reused, reusable, prompt int
	var warm, cold float64
	out.Total.ColdMatchAll = true
	bar := e.NewProgress("bench replay", int64(len(files)), "traces")
	defer bar.Clear()
	for _, f := range files {
		tr, err := trace.Load(f)
		if err != nil {
			return err
		}
		rep, err := replay.Run(ctx, c, tr, replay.Options{DecodeTokens: *decodeTokens, VerifyCold: true})
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		out.Traces = append(out.Traces, result{filepath.Base(f), rep.Summary})
		bar.Clear()
		if !*asJSON {
			printSummary(e, rep)
		}
		bar.Add(1)
		for i, t := range rep.Turns {
			if i == 0 {
				continue
			}
			reused += t.ReusedTokens
			reusable += t.ReusableTokens
			prompt += t.PromptTokens
			warm += t.LatencyMS
			cold += *t.ColdLatencyMS
		}
		out.Total.Turns += rep.Summary.Turns
		out.Total.ColdMatchAll = out.Total.ColdMatchAll && *rep.Summary.ColdMatchAll
		out.Total.MaxLogitDiff = max(out.Total.MaxLogitDiff, *rep.Summary.MaxLogitDiff)
	}
	t := &out.Total
	t.ReuseRatio = float64(reused) / float64(max(reusable, 1))
	t.PromptReuse = float64(reused) / float64(max(prompt, 1))
	t.WarmColdRatio = warm / max(cold, 1e-9)
	t.WarmColdBound = 3 * (1 - t.PromptReuse)
	if *asJSON {
		return e.PrintJSON(out)
	}
	fmt.Fprintf(e.Stdout, "\nALL %d traces, %d turns at ctx %d: reuse_ratio %.4f  prompt_reuse %.4f  warm_cold_ratio %.3f (bound %.3f)  cold_match_all %v  max_logit_diff %.3g\n",
		len(files), t.Turns, *ctxTokens, t.ReuseRatio, t.PromptReuse, t.WarmColdRatio, t.WarmColdBound, t.ColdMatchAll, t.MaxLogitDiff)
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// benchSocket measures what the socket adds: a request round trip (Ping)
// and a streamed decode, each beside the same call made in-process on the
// same server.
func benchSocket(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("bench socket", flag.ContinueOnError)
	model := fs.String("model", defaultModel(), "model for the private daemon")
	n := fs.Int("n", 20000, "round trips")
	tokens := fs.Int("tokens", 64, "tokens per decode")
	reps := fs.Int("reps", 101, "decode repetitions (median of paired differences)")
	asJSON := fs.Bool("json", false, "print JSON")
	ctxdBin := fs.String("ctxd", siblingBinary("ctxd"), "ctxd binary for the socket side")
	threads := fs.Int("threads", 0, "CPU threads of both sides' engines, pinned (0: auto, as ctxd runs by default; auto re-decides every call, so a side may run a call on one core and the next on two)")
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	if *threads < 0 {
		return cli.Usage(errors.New("--threads must not be negative"))
	}
	// The socket side is a real ctxd process, as an agent would see it; the
	// in-process side is the same server code called directly in this
	// process. Both load the same model with the same settings.
	var extra []string
	if *threads > 0 {
		extra = []string{"--threads", fmt.Sprint(*threads)}
	}
	sockPath, pid, stopDaemon, err := startDaemonProcessPID(ctx, *ctxdBin, *model, 2048, extra...)
	if err != nil {
		return err
	}
	defer stopDaemon()
	p, err := sidecar.StartPrivate(withDevice(sidecar.Config{ModelPath: *model, ContextTokens: 2048, Version: "ctxbench-private", NoCold: true, Threads: *threads}))
	if err != nil {
		return err
	}
	defer p.Stop()
	c, err := client.Dial(ctx, sockPath)
	if err != nil {
		return err
	}
	defer c.Close()

	// Round trips.
	sock := make([]time.Duration, *n)
	inproc := make([]time.Duration, *n)
	ping := &pb.Request{Body: &pb.Request_Ping{Ping: &pb.PingRequest{}}}
	for i := 0; i < 200; i++ { // warm up
		c.Ping(ctx, nil)
		p.Server.Handle(ctx, 0, ping, nil)
	}
	bar := e.NewProgress("round trips", int64(*n), "")
	for i := 0; i < *n; i++ {
		t0 := time.Now()
		if err := c.Ping(ctx, nil); err != nil {
			bar.Clear()
			return err
		}
		sock[i] = time.Since(t0)
		t0 = time.Now()
		p.Server.Handle(ctx, 0, ping, nil)
		inproc[i] = time.Since(t0)
		bar.Add(1)
	}
	bar.Clear()

	// Streaming: the same greedy decode over the socket and in-process.
	m := policy.Manifest{Segments: []policy.Segment{{ID: "p", Kind: policy.KindUserTurn, Text: "Once upon a time"}}}
	bar = e.NewProgress("decode pairs", int64(*reps), "")
	quiet, streamed := &cpuMeter{pids: [2]string{fmt.Sprint(pid), "self"}}, &cpuMeter{pids: [2]string{fmt.Sprint(pid), "self"}}
	sockWall, inWall, overhead, serverWall, streamOnly, err := streamTimes(ctx, c, p, m, *tokens, *reps, bar, quiet, streamed)
	bar.Clear()
	if err != nil {
		return err
	}
	rt := struct {
		Calls            int     `json:"round_trips"`
		SocketP50us      float64 `json:"socket_p50_us"`
		SocketP99us      float64 `json:"socket_p99_us"`
		InProcP50us      float64 `json:"inproc_p50_us"`
		TokenSocketUS    float64 `json:"per_token_socket_us"`
		TokenInProcUS    float64 `json:"per_token_inproc_us"`
		TokenServerUS    float64 `json:"per_token_server_side_us"`
		StreamOverheadUS float64 `json:"stream_overhead_us_per_token"`
		StreamFramesUS   float64 `json:"stream_frames_us_per_token"`
		// CPU time the frames cost per token (streamed − no_stream, summed
		// over the pairs): in the daemon (encode, write) and in the
		// client (read, decode, dispatch). Wall time on a busy machine
		// also holds waits for a core; CPU time does not.
		StreamCPUDaemonUS float64 `json:"stream_cpu_daemon_us_per_token"`
		StreamCPUClientUS float64 `json:"stream_cpu_client_us_per_token"`
		// The same as medians of the pairs' differences, which one
		// outlying call moves less than the sums.
		StreamCPUDaemonMedianUS float64 `json:"stream_cpu_daemon_median_us_per_token"`
		StreamCPUClientMedianUS float64 `json:"stream_cpu_client_median_us_per_token"`
		Tokens                  int     `json:"tokens_per_decode"`
	}{
		Calls: *n, SocketP50us: pct(sock, 50), SocketP99us: pct(sock, 99), InProcP50us: pct(inproc, 50),
		TokenSocketUS: sockWall, TokenInProcUS: inWall, TokenServerUS: serverWall, StreamOverheadUS: overhead, StreamFramesUS: streamOnly, Tokens: *tokens,
	}
	if quiet.err == nil && streamed.err == nil {
		n := float64(*tokens * *reps)
		rt.StreamCPUDaemonUS = float64(streamed.sum[0]-quiet.sum[0]) / 1e3 / n
		rt.StreamCPUClientUS = float64(streamed.sum[1]-quiet.sum[1]) / 1e3 / n
		rt.StreamCPUDaemonMedianUS = pairedMedian(streamed, quiet, 0, 1e3*float64(*tokens))
		rt.StreamCPUClientMedianUS = pairedMedian(streamed, quiet, 1, 1e3*float64(*tokens))
	}
	if *asJSON {
		return e.PrintJSON(rt)
	}
	fmt.Fprintf(e.Stdout, "round trip (ping, %d calls): socket p50 %.1f µs, p99 %.1f µs; in-process p50 %.2f µs\n", rt.Calls, rt.SocketP50us, rt.SocketP99us, rt.InProcP50us)
	fmt.Fprintf(e.Stdout, "decode (%d tokens, %d paired runs): socket %.1f µs/token (server side %.1f), in-process %.1f µs/token, streaming overhead (median paired difference) %.1f µs/token\n", rt.Tokens, *reps, rt.TokenSocketUS, rt.TokenServerUS, rt.TokenInProcUS, rt.StreamOverheadUS)
	fmt.Fprintf(e.Stdout, "streaming frames alone (same daemon, streamed − no_stream, median of %d pairs): %.1f µs/token\n", *reps, rt.StreamFramesUS)
	fmt.Fprintf(e.Stdout, "streaming frames' CPU time (streamed − no_stream, over the pairs): daemon %.1f µs/token, client %.1f µs/token; median of the pairs: daemon %.1f, client %.1f\n", rt.StreamCPUDaemonUS, rt.StreamCPUClientUS, rt.StreamCPUDaemonMedianUS, rt.StreamCPUClientMedianUS)
	return nil
}

// streamTimes runs the same decode over the socket and in-process,
// alternating, and returns the median wall time per token of each.
func streamTimes(ctx context.Context, c *client.Client, p *sidecar.Private, m policy.Manifest, tokens, reps int, bar *cli.Progress, quietCPU, streamCPU *cpuMeter) (sockUS, inUS, overheadUS, serverUS, streamUS float64, err error) {
	s, err := c.OpenSession(ctx, "bench-socket")
	if err != nil {
		return 0, 0, 0, 0, 0, err
	}
	defer s.Close(ctx)
	open := p.Server.Handle(ctx, 0, &pb.Request{Body: &pb.Request_OpenSession{OpenSession: &pb.OpenSessionRequest{Name: "bench-inproc"}}}, nil)
	if open.Error != nil {
		return 0, 0, 0, 0, 0, fmt.Errorf("in-process open: %v", open.Error)
	}
	inID := open.GetOpenSession().GetSessionId()
	defer p.Server.Handle(ctx, 0, &pb.Request{Body: &pb.Request_CloseSession{CloseSession: &pb.CloseSessionRequest{SessionId: inID}}}, nil)
	wm := &pb.Manifest{Segments: []*pb.Segment{{Id: "p", Kind: pb.SegmentKind_SEGMENT_KIND_USER_TURN, Text: m.Segments[0].Text}}}
	var sockT, inT, diff, serverSide, streamDiff []float64
	quietSocket := func() (float64, error) {
		if _, err := s.EnsurePrefix(ctx, clientconv.Manifest(m)); err != nil {
			return 0, err
		}
		if _, err := s.PrefillSuffix(ctx); err != nil {
			return 0, err
		}
		t0 := time.Now()
		quietCPU.begin()
		res, err := s.Decode(ctx, client.DecodeOptions{MaxTokens: tokens, NoStream: true}, nil)
		quietCPU.end()
		if err != nil {
			return 0, err
		}
		return float64(time.Since(t0).Microseconds()) / float64(max(res.Tokens, 1)), nil
	}
	viaSocket := func(meter *cpuMeter) (float64, error) {
		if _, err := s.EnsurePrefix(ctx, clientconv.Manifest(m)); err != nil {
			return 0, err
		}
		if _, err := s.PrefillSuffix(ctx); err != nil {
			return 0, err
		}
		n := 0
		t0 := time.Now()
		if meter != nil {
			meter.begin()
		}
		res, err := s.Decode(ctx, client.DecodeOptions{MaxTokens: tokens}, func(client.Token) error { n++; return nil })
		if meter != nil {
			meter.end()
		}
		if err != nil {
			return 0, err
		}
		serverSide = append(serverSide, float64(res.Elapsed.Microseconds())/float64(max(n, 1)))
		return float64(time.Since(t0).Microseconds()) / float64(max(n, 1)), nil
	}
	inProcess := func() (float64, error) {
		for _, req := range []*pb.Request{
			{Body: &pb.Request_EnsurePrefix{EnsurePrefix: &pb.EnsurePrefixRequest{SessionId: inID, Manifest: wm}}},
			{Body: &pb.Request_PrefillSuffix{PrefillSuffix: &pb.PrefillSuffixRequest{SessionId: inID}}},
		} {
			if r := p.Server.Handle(ctx, 0, req, nil); r.Error != nil {
				return 0, fmt.Errorf("in-process: %v", r.Error)
			}
		}
		n := 0
		t0 := time.Now()
		r := p.Server.Handle(ctx, 0, &pb.Request{Body: &pb.Request_Decode{Decode: &pb.DecodeRequest{SessionId: inID, MaxTokens: int32(tokens)}}},
			func(*pb.StreamEvent) error { n++; return nil })
		if r.Error != nil {
			return 0, fmt.Errorf("in-process decode: %v", r.Error)
		}
		return float64(time.Since(t0).Microseconds()) / float64(max(n, 1)), nil
	}
	// Pairs in alternating order, so drift in machine speed cancels; the
	// overhead is the median of the paired differences.
	for r := 0; r < reps; r++ {
		var a, b float64
		var err error
		if r%2 == 0 {
			if a, err = viaSocket(nil); err == nil {
				b, err = inProcess()
			}
		} else {
			if b, err = inProcess(); err == nil {
				a, err = viaSocket(nil)
			}
		}
		if err != nil {
			return 0, 0, 0, 0, 0, err
		}
		sockT, inT, diff = append(sockT, a), append(inT, b), append(diff, a-b)
		// The same daemon with and without per-token frames isolates what
		// streaming itself costs from process-to-process differences.
		q, err := quietSocket()
		if err != nil {
			return 0, 0, 0, 0, 0, err
		}
		a2, err := viaSocket(streamCPU)
		if err != nil {
			return 0, 0, 0, 0, 0, err
		}
		streamDiff = append(streamDiff, a2-q)
		bar.Add(1)
	}
	return median(sockT), median(inT), median(diff), median(serverSide), median(streamDiff), nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func pct(d []time.Duration, p int) float64 {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[(len(s)-1)*p/100].Nanoseconds()) / 1000
}

// siblingBinary is name next to the running ctxctl, or name on PATH.
func siblingBinary(name string) string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return name
}

// startDaemonProcess runs ctxd as a child process on a temporary socket and
// waits until it answers.
func startDaemonProcess(ctx context.Context, bin, model string, ctxTokens int) (string, func(), error) {
	sock, _, stop, err := startDaemonProcessPID(ctx, bin, model, ctxTokens)
	return sock, stop, err
}

// startDaemonProcessPID is startDaemonProcess that also returns the
// daemon's pid.
func startDaemonProcessPID(ctx context.Context, bin, model string, ctxTokens int, extraArgs ...string) (string, int, func(), error) {
	dir, err := os.MkdirTemp("", "ctxbench-")
	if err != nil {
		return "", 0, nil, err
	}
	sock := filepath.Join(dir, "ctxd.sock")
	args := append([]string{"--model", model, "--ctx", fmt.Sprint(ctxTokens), "--socket", sock,
		"--data-dir", filepath.Join(dir, "data"), "--log-level", "error"}, extraArgs...)
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	cmd.Env = append(os.Environ(), benchDaemonEnv...)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", 0, nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		os.RemoveAll(dir)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := client.Dial(ctx, sock)
		if err == nil {
			c.Close()
			return sock, cmd.Process.Pid, stop, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return "", 0, nil, fmt.Errorf("ctxd did not come up on %s: %v", sock, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var benchDaemonEnv = strings.Fields(os.Getenv("CTXD_BENCH_DAEMON_ENV"))
