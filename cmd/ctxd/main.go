// Command ctxd is the long-context KV sidecar daemon.
//
//	ctxd --model PATH [--ctx N] [--socket PATH] [--data-dir DIR] [--kv-type f16|q8_0] [--flash-attn]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/sidecar"
)

var version = "0.1.0-dev"

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("ctxd", flag.ContinueOnError)
	var (
		cfg       sidecar.Config
		kvType    string
		allowUIDs string
		logLevel  string
		showVer   bool
	)
	fs.StringVar(&cfg.ModelPath, "model", "", "GGUF model to load at start (optional: clients may load one)")
	fs.IntVar(&cfg.ContextTokens, "ctx", 0, "KV context in tokens (0: derived from free memory and the model's maximum; may exceed the trained context, with a warning)")
	fs.StringVar(&cfg.SocketPath, "socket", sidecar.DefaultSocketPath(), "Unix socket to serve")
	fs.StringVar(&cfg.DataDir, "data-dir", sidecar.DefaultDataDir(), "state directory (one ctxd owns it)")
	fs.StringVar(&kvType, "kv-type", "f16", "KV cache type: f16 or q8_0 (q8_0 needs --flash-attn)")
	fs.BoolVar(&cfg.FlashAttention, "flash-attn", false, "use flash attention")
	fs.IntVar(&cfg.BatchTokens, "batch", 512, "prefill batch size in tokens")
	fs.IntVar(&cfg.Threads, "threads", 0, "CPU threads (0: all)")
	fs.StringVar(&allowUIDs, "allow-uids", "", "comma-separated uids allowed besides our own")
	fs.IntVar(&cfg.HotTokens, "hot", 0, "hot-set budget in tokens: sessions grow beyond it, parked in host RAM (0: dense, sessions limited to --ctx)")
	fs.IntVar(&cfg.Window, "window", 0, "with --hot: positions stay below this (0: the model's trained context)")
	fs.IntVar(&cfg.BlockTokens, "block", 64, "with --hot: block size in tokens")
	fs.IntVar(&cfg.SinkTokens, "sinks", 4, "with --hot: attention-sink tokens kept hot")
	fs.IntVar(&cfg.RecentTokens, "recent", 0, "with --hot: recent-window tokens kept hot (0: a quarter of --hot)")
	fs.BoolVar(&cfg.NoRetrieval, "no-retrieval", false, "with --hot: keep only sinks, pinned and recent tokens (baseline)")
	fs.Int64Var(&cfg.ArenaBytes, "arena-bytes", 0, "with --hot: host-RAM arena budget (0: a quarter of available RAM)")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&showVer, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if showVer {
		fmt.Println("ctxd", version)
		return 0
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "ctxd: --log-level %q: %v\n", logLevel, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	slog.SetDefault(log)
	if lvl <= slog.LevelDebug {
		llama.SetLogger(log)
	}
	kv, err := policy.ParseKVType(kvType)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ctxd: --kv-type: %v\n", err)
		return 2
	}
	cfg.KVType = kv
	for _, f := range strings.FieldsFunc(allowUIDs, func(r rune) bool { return r == ',' }) {
		uid, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || uid < 0 {
			fmt.Fprintf(os.Stderr, "ctxd: --allow-uids: %q is not a uid\n", f)
			return 2
		}
		cfg.AllowUIDs = append(cfg.AllowUIDs, uid)
	}
	cfg.Logger, cfg.Version = log, version

	srv, err := sidecar.New(cfg)
	if err != nil {
		if errors.Is(err, sidecar.ErrAlreadyRunning) {
			fmt.Fprintf(os.Stderr, "ctxd: %v\nctxd: only one ctxd may own a data directory; stop the other one or pass another --data-dir\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "ctxd: %v\n", err)
		return 1
	}
	defer srv.Close()
	ln, err := srv.Listen()
	if err != nil {
		fmt.Fprintf(os.Stderr, "ctxd: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := srv.Serve(ctx, ln); err != nil {
		log.Error("stopped", "err", err)
		return 1
	}
	log.Info("shut down cleanly")
	return 0
}
