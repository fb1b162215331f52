# ctxd build. llama.cpp comes from the Go module github.com/ollama/ollama and
# is compiled by cgo; its headers are found through CGO_CPPFLAGS computed here.

GO          ?= go
MODEL       ?= $(abspath ../shared/models/stories260K.gguf)
NEEDLE_MODEL ?= $(abspath ../shared/models/needle.gguf)
TRACES      ?= $(abspath ../shared/traces)
PREFIX      ?= $(HOME)/.local
# -march=native gives about 1.6x prefill on this CPU; set NATIVE= for a portable build.
NATIVE      ?= -march=native
TEST_TIMEOUT ?= 30m

OLLAMA_DIR  := $(shell $(GO) list -m -f '{{.Dir}}' github.com/ollama/ollama 2>/dev/null)
MALGO_DIR   := $(shell $(GO) list -m -f '{{.Dir}}' github.com/gen2brain/malgo 2>/dev/null)
GGML_DIR    := $(OLLAMA_DIR)/ml/backend/ggml/ggml
# The generated include folder is named after the module versions and lives
# outside the checkout, so every clone and worktree of the same versions
# passes the same CGO_CPPFLAGS and shares Go's build cache: llama.cpp is
# compiled once per machine (and per NATIVE), not once per checkout.
CACHE_HOME  := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)
INCLUDE_DIR := $(CACHE_HOME)/ctxd/include/$(notdir $(OLLAMA_DIR))+$(notdir $(MALGO_DIR))

# -idirafter: ggml's internal headers, searched only after every other
# folder, so they resolve nothing the module's own packages already find;
# engine/llama/amx needs them to compile ggml's AMX kernels (see there).
export CGO_ENABLED  := 1
export CGO_CPPFLAGS := -I$(INCLUDE_DIR) -I$(OLLAMA_DIR)/llama/llama.cpp/include -I$(GGML_DIR)/include -idirafter $(GGML_DIR)/src -idirafter $(GGML_DIR)/src/ggml-cpu
# -O3: the vendored ggml-cpu's C++ kernels (llamafile's tinyBLAS, ops.cpp) get
# their compile flags from here; at -O2 its f16 GEMM ran at half upstream's
# speed, at -O3 as fast (docs/BENCHMARKS.md, tools/ggmlmm).
export CGO_CFLAGS   := -O3 $(NATIVE)
export CGO_CXXFLAGS := -O3 $(NATIVE)
export CTXD_MODEL   := $(MODEL)
export CTXD_NEEDLE_MODEL := $(NEEDLE_MODEL)
export CTXD_TRACES  := $(TRACES)

# ctxd: the daemon; ctxctl: the operator's CLI (pure Go, no cgo); ctxtrace:
# eBPF probes; ctxbench: benchmarks, evaluations, gen-model (links the engine).
BINARIES := bin/ctxd bin/ctxctl bin/ctxtrace bin/ctxbench

.PHONY: all build build-targets deps headers platform cgo-env test test-short test-fake fuzz vet bench bench-synth bench-trace eval run generate install clean gpu test-gpu h200-pack

all: build

# deps downloads the Go modules that carry llama.cpp and the vendored header.
deps:
	$(GO) mod download github.com/ollama/ollama github.com/gen2brain/malgo

# platform stops with a clear message where ctxd is not supported: it
# builds for Linux on x86-64 (any x86-64 CPU; AMX, AVX-512 and AVX2 are used
# where the compiler enables them).
platform:
	@case "$$(uname -s)/$$(uname -m)" in Linux/x86_64) ;; \
	*) echo "ctxd builds for Linux on x86-64; this machine is $$(uname -s)/$$(uname -m) (see README: Supported machines)" >&2; exit 1;; esac

# cgo-env prints the cgo flags this Makefile computes as shell exports
# (env.sh evaluates it, for running go by hand).
cgo-env:
	@printf 'export CGO_ENABLED=1\nexport CGO_CPPFLAGS="%s"\nexport CGO_CFLAGS="%s"\nexport CGO_CXXFLAGS="%s"\n' '$(CGO_CPPFLAGS)' '$(CGO_CFLAGS)' '$(CGO_CXXFLAGS)'

# headers links miniaudio.h (shipped at the root of gen2brain/malgo) where
# llama.cpp's vendored include "miniaudio/miniaudio.h" finds it.
headers: deps platform
	@test -n "$(MALGO_DIR)" || { echo "run 'make deps' first"; exit 1; }
	@mkdir -p $(INCLUDE_DIR)
	@ln -sfn $(MALGO_DIR) $(INCLUDE_DIR)/miniaudio
	@test -f /usr/include/nlohmann/json.hpp || { echo "missing nlohmann/json.hpp: apt-get install nlohmann-json3-dev"; exit 1; }
	@test -f /usr/include/stb/stb_image.h || { echo "missing stb/stb_image.h: apt-get install libstb-dev"; exit 1; }

build: headers
	$(GO) build -o bin/ ./cmd/...

# build-targets links cmd/ctxd for CPUs this machine may not be (an AMX
# Xeon, a baseline x86-64-v2) and checks that ggml's AMX kernels are linked
# exactly when the compiler enables AMX: the next CPU-feature link error
# fails CI, not a user (tools/build/targets.sh). Nothing is run.
TARGETS ?= sapphirerapids x86-64-v2
build-targets: headers
	GO=$(GO) tools/build/targets.sh $(TARGETS)

vet: headers
	$(GO) vet ./...

test: headers
	$(GO) vet ./...
	# -p 1: engine tests use every core (ggml threads); two test binaries at
	# once oversubscribe the CPUs and ggml's spinning barriers crawl.
	$(GO) test -p 1 -count=1 -timeout $(TEST_TIMEOUT) ./...

# gpu builds llama.cpp's GPU backend from the ggml sources vendored in the
# Go module with CMake (tools/gpu/backend.sh) into bin/backends, where ctxd
# and ctxbench load it at start: GPU=vulkan (any vendor; needs cmake, glslc
# and the Vulkan headers: .ci/setup installs them) or GPU=cuda (nvcc).
# The patched source copy and the CMake build are kept in CTXD_GPU_CACHE.
GPU         ?= vulkan
BACKEND_DIR ?= $(CURDIR)/bin/backends
gpu:
	GGML_MODULE_DIR=$(OLLAMA_DIR) tools/gpu/backend.sh $(GPU) $(BACKEND_DIR)

# test-gpu runs the essential engine and sidecar tests again with every
# layer on the backend's device; they fail when the layers are not there.
GPU_TESTS ?= TestSnapshotFromOtherBackendIsRefused|TestFacts|TestGreedyStory|TestChunkedEqualsWhole|TestExtractInsertBitwise|TestSaveLoadSeq|TestCopyRange|TestCancelLeavesNothing|TestDeviceMatchesCPU|TestReusedCellsLeakNothing|TestRepeatedTurnsAreExact|TestWarmEqualsCold|TestHotSetStreamsBeyondTheWindow|TestNeedleComesBackOnce|TestSnapshotRestoreAfterRestartIsBitExactDense|TestHotSetSnapshotRestoreIsBitExact|TestCancelDecodeWithinAToken|TestDecodeCaptureIsDecode|TestRangeKeysAreTheKeys|TestBytesAfterMovesAreRotated
test-gpu: headers gpu
	CTXD_BACKEND=$(GPU) CTXD_BACKEND_DIR=$(BACKEND_DIR) $(GO) test -p 1 -count=1 -timeout $(TEST_TIMEOUT) -run '^($(GPU_TESTS))$$' ./engine/llama/ ./sidecar/

# h200-pack prepares what tools/gpu/h200.sh needs on a machine without Go
# or network (README "GPU"): ctxbench, the engine and sidecar test binaries,
# the vendored ggml sources, the test models and traces, in .build/h200 and
# packed as .build/h200.tgz (the one path to carry: under 64 MiB).
H200_DIR := $(CURDIR)/.build/h200
h200-pack: headers
	rm -rf $(H200_DIR) && mkdir -p $(H200_DIR)/bin $(H200_DIR)/src/ml/backend/ggml $(H200_DIR)/models
	$(GO) build -ldflags='-s -w' -o $(H200_DIR)/bin/ ./cmd/ctxbench
	$(GO) test -c -ldflags='-s -w' -o $(H200_DIR)/bin/llama.test ./engine/llama
	$(GO) test -c -ldflags='-s -w' -o $(H200_DIR)/bin/sidecar.test ./sidecar
	cp $(OLLAMA_DIR)/CMakeLists.txt $(OLLAMA_DIR)/CMakePresets.json $(H200_DIR)/src/
	cp -r $(OLLAMA_DIR)/ml/backend/ggml/ggml $(H200_DIR)/src/ml/backend/ggml/ && chmod -R u+w $(H200_DIR)/src
	cp $(MODEL) $(NEEDLE_MODEL) $(H200_DIR)/models/ && cp -r $(TRACES) $(H200_DIR)/traces
	tar -C $(dir $(H200_DIR)) -czf $(H200_DIR).tgz h200
	ls -la $(H200_DIR).tgz

test-short: headers
	$(GO) test -short -count=1 ./...

# test-fake runs the daemon's unit tests on the pure-Go fake engine
# (sidecar/fake_*_test.go, engine/enginefake), the fake's own tests, the
# daemon's inner packages (layout, snapshot, tiers) and the import rules:
# seconds, no model file.
test-fake: headers
	$(GO) test -count=1 -run Fake ./sidecar/
	$(GO) test -count=1 ./engine/ ./engine/enginefake/ ./sidecar/internal/... ./internal/layering/

# fuzz runs every fuzz target for FUZZTIME each, one after another (CI
# calls it): the chat-template sandbox, the HTTP request decoders and
# the orphan tapes' spans records read back from the arena. A
# failing input is written under the package's testdata/fuzz and fails the
# run. FUZZ_PARALLEL bounds the workers (default: every core).
FUZZTIME ?= 20s
FUZZ_PARALLEL ?= 0
FUZZ_TARGETS := ./third_party/jinja:FuzzRender \
	./httpapi:FuzzOpenAIChatRequest ./httpapi:FuzzOpenAICompletionRequest \
	./httpapi:FuzzOllamaChatRequest ./httpapi:FuzzOllamaGenerateRequest \
	./httpapi:FuzzAnthropicRequest ./httpapi:FuzzResponsesRequest \
	./sidecar/internal/tiers:FuzzDecodeSpansRecord ./client:FuzzTokenWire
fuzz: headers
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$name ($$pkg) for $(FUZZTIME)"; \
		$(GO) test -count=1 -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) \
			$$( [ "$(FUZZ_PARALLEL)" != 0 ] && echo -parallel $(FUZZ_PARALLEL) ) $$pkg; \
	done

# Benchmarks print ratios measured in one run; see docs/BENCHMARKS.md.
BENCH_CTX ?= 8192
bench: build
	./bin/ctxbench bench socket --model $(MODEL)
	./bin/ctxbench bench replay --model $(MODEL) --traces $(TRACES) --ctx $(BENCH_CTX)
	./bin/ctxbench bench resume --model $(MODEL) --traces $(TRACES) --tokens 65536
	./bin/ctxbench bench crash --model $(MODEL) --kills 50

# What ctxtrace's eBPF probes add to a replay (needs root or CAP_BPF + CAP_PERFMON).
bench-trace: build
	./bin/ctxbench bench trace --model $(MODEL) --pairs 3

# The SSD-tier benchmark on a realistic-size model (684 MiB written to bin/).
SYNTH_MODEL ?= bin/synth-24l.gguf
bench-synth: build
	test -f $(SYNTH_MODEL) || ./bin/ctxbench gen-model --layers 24 --embd 896 --heads 14 --kv-heads 2 --ffn 4864 --out $(SYNTH_MODEL)
	./bin/ctxbench bench resume --model $(SYNTH_MODEL) --traces $(TRACES) --tokens 4096 --hot 0
	./bin/ctxbench bench resume --model $(SYNTH_MODEL) --traces $(TRACES) --tokens 4096 --hot 0 --kv q8_0

# Evaluations beyond the window (docs/BENCHMARKS.md, "Beyond the trained window").
eval: build
	./bin/ctxbench eval recall --model $(NEEDLE_MODEL)
	./bin/ctxbench eval ppl --model $(MODEL) --traces $(TRACES) --png bin/ppl.png
	./bin/ctxbench eval scale --model $(MODEL) --traces $(TRACES) --tokens 200000

# The main job: serve stories260K with a 512-token hot set, so sessions
# (and the bundled trajectories) grow far past its window.
RUN_FLAGS ?= --hot 512 --ctx 512
run: build
	./bin/ctxd --model $(MODEL) $(RUN_FLAGS)

# generate rebuilds the committed generated code: ctxtrace's eBPF object and
# its Go bindings (bpf2go; needs clang-14 and llvm-strip-14:
# apt-get install clang-14 llvm-14) and the protobuf messages (protoc and
# protoc-gen-go). A normal build needs neither.
generate:
	$(GO) generate ./tools/ctxtrace ./protocol/ctxdpb

# install puts the binaries in $(PREFIX)/bin and the systemd user units in
# $(UNITDIR), with ExecStart pointing at the installed ctxd. HOME, PREFIX and
# UNITDIR may be overridden (e.g. a scratch home for tests); INSTALL_BINARIES
# names what is copied (default: the operator's binaries, each once; not
# ctxbench, a development tool).
UNITDIR     ?= $(HOME)/.config/systemd/user
INSTALL_BINARIES ?= $(filter-out bin/ctxbench,$(BINARIES))
install: build
	install -d "$(PREFIX)/bin" "$(UNITDIR)"
	install -m 0755 $(INSTALL_BINARIES) "$(PREFIX)/bin/"
	@# GPU backends built by make gpu go beside the installed ctxd, where it looks for them.
	@if ls bin/backends/*.so* >/dev/null 2>&1; then install -d "$(PREFIX)/bin/backends" && install -m 0644 bin/backends/*.so* "$(PREFIX)/bin/backends/" && echo "installed GPU backends in $(PREFIX)/bin/backends"; fi
	sed 's|^ExecStart=.*|ExecStart="$(subst %,%%,$(abspath $(PREFIX)))/bin/ctxd"|' deploy/systemd/ctxd.service > "$(UNITDIR)/.ctxd.service.tmp"
	install -m 0644 "$(UNITDIR)/.ctxd.service.tmp" "$(UNITDIR)/ctxd.service"
	rm -f "$(UNITDIR)/.ctxd.service.tmp"
	install -m 0644 deploy/systemd/ctxd.socket "$(UNITDIR)/ctxd.socket"
	@echo "installed; now: systemctl --user daemon-reload && systemctl --user enable --now ctxd.socket"

clean:
	rm -rf bin .build
