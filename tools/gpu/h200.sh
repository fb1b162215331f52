#!/usr/bin/env bash
# h200.sh: the one-shot CUDA check for an NVIDIA machine without Go or
# network (the H200 lent at times: nvcc 13, CMake, ninja). Prepare on the
# build machine with `make h200-pack` (ctxctl, test binaries, vendored ggml
# sources, test models and traces in .build/h200.tgz), carry .build/h200.tgz
# along, then run from the repository root:
#
#   bash tools/gpu/h200.sh [build|test|bench|scale|all]   (default: all)
#
# Phases, each with its own time limit (PHASE_TIMEOUT seconds, default 540):
#   build  the CUDA backend from the carried sources (sm_90 only:
#          CUDA_ARCHITECTURES=90) into .build/h200/bin/backends
#   test   the engine and sidecar test binaries with CTXD_BACKEND=cuda:
#          they fail unless every layer and the KV are on CUDA0
#   bench  `ctxctl bench speed` (prefill and decode tok/s, GPU vs CPU) on
#          synthetic 0.5 B and 7 B shapes made by `ctxctl gen-model`
#   scale  `ctxctl eval scale --tokens 200000` on the 0.5 B shape, on the GPU
# Everything is logged to $OUT/h200.log (or .build/h200/h200.log) and the
# figures to $OUT/*.json for the README.
set -uo pipefail
cd "$(dirname "$0")/../.."
pack=.build/h200
[ -d "$pack" ] || [ ! -f "$pack.tgz" ] || tar -C .build -xzf "$pack.tgz"
out=${OUT:-$pack/out}
mkdir -p "$out"
log="$out/h200.log"
limit=${PHASE_TIMEOUT:-540}
phase=${1:-all}
bin="$pack/bin"
export CTXD_MODEL="$PWD/$pack/models/stories260K.gguf" CTXD_NEEDLE_MODEL="$PWD/$pack/models/needle.gguf" CTXD_TRACES="$PWD/$pack/traces"
export CTXD_BACKEND_DIR="$PWD/$bin/backends" CTXD_GPU_CACHE="$PWD/$pack/cache"

say() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$log"; }
run() { timeout "$limit" "$@" 2>&1 | tee -a "$log"; return "${PIPESTATUS[0]}"; }

[ -x "$bin/ctxctl" ] || { echo "h200.sh: $bin/ctxctl missing: run 'make h200-pack' on the build machine and carry $pack" >&2; exit 2; }
{ nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv; nvcc --version | tail -2; nproc; } 2>&1 | tee -a "$log"

if [[ $phase == build || $phase == all ]]; then
	say "build: CUDA backend (sm_${CUDA_ARCHITECTURES:-90})"
	CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES:-90} GGML_MODULE_DIR="$PWD/$pack/src" \
		run tools/gpu/backend.sh cuda "$bin/backends" || { say "build failed"; exit 1; }
fi

if [[ $phase == test || $phase == all ]]; then
	say "test: engine and sidecar on CUDA"
	tests='TestFacts|TestGreedyStory|TestChunkedEqualsWhole|TestExtractInsertBitwise|TestSaveLoadSeq|TestCopyRange|TestCancelLeavesNothing|TestDeviceMatchesCPU|TestReusedCellsLeakNothing|TestRepeatedTurnsAreExact|TestWarmEqualsCold|TestHotSetStreamsBeyondTheWindow|TestSnapshotRestoreAfterRestartIsBitExactDense|TestHotSetSnapshotRestoreIsBitExact|TestCancelDecodeWithinAToken|TestNeedleRecallNeedsRetrieval'
	(cd engine/llama && CTXD_BACKEND=cuda run "../../$bin/llama.test" -test.count=1 -test.v -test.run "^($tests)\$") | grep -E '^(---|ok|FAIL|PASS|\s+\w+_test.go)' | tee "$out/test-engine.txt"
	(cd sidecar && CTXD_BACKEND=cuda run "../$bin/sidecar.test" -test.count=1 -test.v -test.run "^($tests)\$") | grep -E '^(---|ok|FAIL|PASS|\s+\w+_test.go)' | tee "$out/test-sidecar.txt"
fi

if [[ $phase == bench || $phase == all ]]; then
	say "bench: synthetic models"
	[ -f "$pack/synth-0.5b.gguf" ] || run "$bin/ctxctl" gen-model --from "$CTXD_MODEL" --layers 24 --embd 896 --heads 14 --kv-heads 2 --ffn 4864 --ctx 32768 --out "$pack/synth-0.5b.gguf"
	[ -f "$pack/synth-7b.gguf" ] || run "$bin/ctxctl" gen-model --from "$CTXD_MODEL" --layers 28 --embd 3584 --heads 28 --kv-heads 4 --ffn 18944 --ctx 32768 --out "$pack/synth-7b.gguf"
	run "$bin/ctxctl" --no-progress bench speed --model "$pack/synth-0.5b.gguf" --prompt 2048 --generate 64 --flash-attn --json | tee "$out/speed-0.5b.json"
	# The CPU is slow on 7 B: fewer tokens there keep the phase short.
	run "$bin/ctxctl" --no-progress bench speed --model "$pack/synth-7b.gguf" --prompt 512 --generate 16 --flash-attn --json | tee "$out/speed-7b.json"
fi

if [[ $phase == scale || $phase == all ]]; then
	say "scale: 200k tokens on the GPU"
	# eval scale's hot set is its --window (stories' 512 by default); a
	# real model's window is what a GPU hot set is for.
	run "$bin/ctxctl" --no-progress eval scale --model "$pack/synth-0.5b.gguf" --window 8192 --tokens 200000 --json | tee "$out/scale-0.5b.json"
fi
say "done"
