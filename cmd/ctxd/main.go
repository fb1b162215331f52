// Command ctxd is the long-context KV sidecar daemon.
//
//	ctxd [--config FILE] [--model PATH] [--ctx N] [--socket PATH] [--data-dir DIR]
//	     [--kv-type f16|q8_0] [--flash-attn] [--hot auto|N] ... [--http ADDR|off] [--print-config]
//	     [--backend-dir DIR] [--device cpu|vulkan|cuda|NAME] [--gpu-layers N]
//
// Besides the Unix socket it serves the OpenAI- and Ollama-compatible HTTP
// API of package httpapi (default 127.0.0.1:11435). At start it loads the
// GPU backend libraries of --backend-dir (default: backends beside the
// binary) and logs which devices they offer, or in one line why it runs on
// the CPU.
//
// Every setting is also a key of the TOML config file
// ($XDG_CONFIG_HOME/ctxd/ctxd.toml by default) and an environment variable
// CTXD_<KEY>; flags win over the environment, which wins over the file
// (config.go). Under systemd it serves the socket the manager passes and
// speaks the notify and watchdog protocols (service.go, deploy/systemd).
//
// Invariants:
//   - A setting's value comes from the last source that sets it: default,
//     config file, environment, flag. A bad value or an unknown file key
//     stops ctxd with exit status 2 and a message naming the key, the
//     source (FILE:LINE, env CTXD_KEY or flag --key) and the reason.
//   - READY=1 is sent only once the model is loaded and the socket
//     listens; STOPPING=1 once serving has ended.
//   - A socket passed by the service manager is served as is and never
//     unlinked; only a socket ctxd created itself is removed on exit.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/ctxd/ctxd/engine/llama"
)

var version = "0.1.0-dev"

func main() {
	os.Exit(run(os.Args[1:]))
}

// run is ctxd with args; it returns the exit status: 0 after a clean
// shutdown (or -h, --version, --print-config), 1 when serving fails, 2 for
// a bad command line, environment or config file.
func run(args []string) int {
	inv, err := parseInvocation(args, os.LookupEnv, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case err != nil:
		fmt.Fprintf(os.Stderr, "ctxd: %v\n", err)
		return 2
	}
	if inv.showVersion {
		fmt.Println("ctxd", version)
		return 0
	}
	cfg := inv.cfg
	if inv.printConfig {
		cfg.print(os.Stdout)
		return 0
	}
	log := newLogger(os.Stderr, cfg.logLevel, cfg.logFormat)
	slog.SetDefault(log)
	for _, w := range cfg.unknownEnv(os.Environ()) {
		log.Warn("unknown environment variable: " + w)
	}
	if cfg.logLevel <= slog.LevelDebug {
		llama.SetLogger(log)
	}
	sc := cfg.serverConfig()
	sc.Logger, sc.Version = log, version
	cfg.http.Logger, cfg.http.Version = log, version
	logBackends(log, sc.BackendDir)
	return serve(sc, httpSettings{cfg: cfg.http, explicit: cfg.setting("http").source != "default"}, log)
}

// logBackends loads the GPU backend libraries of dir and says in one line
// which devices they offer, or why ctxd runs on the CPU.
func logBackends(log *slog.Logger, dir string) {
	if dir == "" {
		log.Info("running on the CPU", "why", "no --backend-dir")
		return
	}
	if err := llama.LoadBackends(dir); err != nil {
		log.Info("running on the CPU", "why", err.Error())
		return
	}
	var gpus []string
	for _, d := range llama.Devices() {
		if d.Offloads() {
			gpus = append(gpus, fmt.Sprintf("%s (%s, %s, %d MiB free of %d)", d.Name, d.Backend, d.Description, d.FreeBytes>>20, d.TotalBytes>>20))
		}
	}
	if len(gpus) == 0 {
		log.Info("running on the CPU", "why", "the backend libraries in "+dir+" found no GPU (Mesa's software lavapipe is listed only with GGML_VK_VISIBLE_DEVICES=0)")
		return
	}
	log.Info("GPU backends loaded", "dir", dir, "devices", strings.Join(gpus, "; "))
}
