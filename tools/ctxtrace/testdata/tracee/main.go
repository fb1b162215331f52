// Command tracee is a minimal ctxd for ctxtrace's tests: a real sidecar
// serving its socket, built by the tests with its symbol table so the
// fetch-phase uprobes can find the markers. It exits when stdin closes.
//
// With --io-file, each SIGUSR1 makes it pwrite, fsync, fdatasync and pread
// that file (the I/O calls the SSD tier makes) and print "io done".
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"

	"golang.org/x/sys/unix"

	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/sidecar"
)

func main() {
	var cfg sidecar.Config
	flag.StringVar(&cfg.ModelPath, "model", "", "GGUF model")
	flag.StringVar(&cfg.SocketPath, "socket", "", "socket")
	flag.StringVar(&cfg.DataDir, "data-dir", "", "data directory")
	flag.IntVar(&cfg.ContextTokens, "ctx", 256, "context tokens")
	flag.IntVar(&cfg.HotTokens, "hot", 256, "hot-set budget")
	flag.Int64Var(&cfg.ArenaBytes, "arena-bytes", 64<<20, "arena budget")
	ioFile := flag.String("io-file", "", "on SIGUSR1: pwrite, fsync, fdatasync and pread this file")
	flag.Parse()
	if *ioFile != "" {
		go ioOnSignal(*ioFile)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.Engine = llama.Backend{}
	srv, err := sidecar.New(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracee:", err)
		os.Exit(1)
	}
	defer srv.Close()
	ln, err := srv.Listen()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracee:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	if err := srv.Serve(ctx, ln); err != nil {
		fmt.Fprintln(os.Stderr, "tracee:", err)
		os.Exit(1)
	}
}

func ioOnSignal(path string) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGUSR1)
	for range sig {
		err := func() error {
			f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				return err
			}
			defer f.Close()
			buf := make([]byte, 4096)
			if _, err := f.WriteAt(buf, 0); err != nil {
				return err
			}
			if err := f.Sync(); err != nil {
				return err
			}
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				return err
			}
			_, err = f.ReadAt(buf, 0)
			return err
		}()
		if err != nil {
			fmt.Println("io failed:", err)
			continue
		}
		fmt.Println("io done")
	}
}
