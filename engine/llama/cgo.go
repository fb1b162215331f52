package llama

/*
#cgo LDFLAGS: -lm
#include <stdlib.h>
#include <stdint.h>
#include "llama.h"

extern void ctxdLlamaLog(int level, char *text);

static void ctxd_log_cb(enum ggml_log_level level, const char *text, void *user) {
	(void)user;
	ctxdLlamaLog((int)level, (char *)text);
}

static void ctxd_install_log(void) { llama_log_set(ctxd_log_cb, NULL); }

*/
import "C"

import (
	"log/slog"
	"strings"
	"sync"

	_ "github.com/ollama/ollama/llama" // links llama.cpp and ggml

	_ "github.com/ctxd/ctxd/engine/llama/amx" // ggml's AMX kernels, where the compiler enables AMX
)

var initOnce sync.Once

// logger receives llama.cpp's log lines; replaced by SetLogger.
var logger struct {
	sync.Mutex
	l *slog.Logger
}

// SetLogger routes llama.cpp's own log lines to l: errors as warnings,
// everything else as debug. Without it only errors reach slog.Default.
func SetLogger(l *slog.Logger) {
	logger.Lock()
	logger.l = l
	logger.Unlock()
}

func backendInit() {
	initOnce.Do(func() {
		C.llama_backend_init()
		C.ctxd_install_log()
	})
}

//export ctxdLlamaLog
func ctxdLlamaLog(level C.int, text *C.char) {
	logger.Lock()
	l := logger.l
	logger.Unlock()
	msg := strings.TrimRight(C.GoString(text), "\n")
	if msg == "" {
		return
	}
	noteLogLine(msg)
	// llama.cpp's warnings are mostly about settings we chose on purpose
	// (a context smaller than the trained one, missing optional tokens), so
	// they are debug lines; its errors explain failures we also return typed.
	switch {
	case l == nil && level == C.GGML_LOG_LEVEL_ERROR:
		slog.Default().Warn("llama.cpp", "msg", msg)
	case l == nil:
	case level == C.GGML_LOG_LEVEL_ERROR:
		l.Warn("llama.cpp", "msg", msg)
	default:
		l.Debug("llama.cpp", "msg", msg)
	}
}

// SystemInfo reports the CPU features and backends llama.cpp was built with.
func SystemInfo() string {
	backendInit()
	return strings.TrimSpace(C.GoString(C.llama_print_system_info()))
}
