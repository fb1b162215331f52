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
# Everything is logged to $OUT/h200.log (or .build/h200/out/h200.log) and
# the figures to $OUT/*.json for the README. GPU=vulkan runs the same
# phases on a Vulkan backend (how the script was checked without an NVIDIA
# machine); SHAPES="0.5b" skips the 13 GB 7 B model.
set -uo pipefail
cd "$(dirname "$0")/../.."
pack="$PWD/.build/h200"
[ -d "$pack" ] || [ ! -f "$pack.tgz" ] || tar -C .build -xzf "$pack.tgz"
out=${OUT:-$pack/out}
mkdir -p "$out"
log="$out/h200.log"
limit=${PHASE_TIMEOUT:-540}
phase=${1:-all}
gpu=${GPU:-cuda}
shapes=${SHAPES:-0.5b 7b}
bin="$pack/bin"
export CTXD_MODEL="$pack/models/stories260K.gguf" CTXD_NEEDLE_MODEL="$pack/models/needle.gguf" CTXD_TRACES="$pack/traces"
export CTXD_BACKEND_DIR="$bin/backends" CTXD_GPU_CACHE="$pack/cache"

say() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$log"; }
run() { timeout "$limit" "$@" 2>&1 | tee -a "$log"; return "${PIPESTATUS[0]}"; }

[ -x "$bin/ctxctl" ] || { echo "h200.sh: $bin/ctxctl missing: run 'make h200-pack' on the build machine and carry $pack" >&2; exit 2; }
{ nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv; nvcc --version | tail -2; nproc; } 2>&1 | tee -a "$log"

if [[ $phase == build || $phase == all ]]; then
	say "build: $gpu backend (CUDA: sm_${CUDA_ARCHITECTURES:-90})"
	CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES:-90} GGML_MODULE_DIR="$pack/src" \
		run tools/gpu/backend.sh "$gpu" "$bin/backends" || { say "build failed"; exit 1; }
fi

if [[ $phase == test || $phase == all ]]; then
	say "test: engine and sidecar on $gpu"
	tests='TestSnapshotFromOtherBackendIsRefused|TestFacts|TestGreedyStory|TestChunkedEqualsWhole|TestExtractInsertBitwise|TestSaveLoadSeq|TestCopyRange|TestCancelLeavesNothing|TestDeviceMatchesCPU|TestReusedCellsLeakNothing|TestRepeatedTurnsAreExact|TestWarmEqualsCold|TestHotSetStreamsBeyondTheWindow|TestSnapshotRestoreAfterRestartIsBitExactDense|TestHotSetSnapshotRestoreIsBitExact|TestCancelDecodeWithinAToken|TestNeedleRecallNeedsRetrieval'
	export CTXD_BACKEND=$gpu
	(cd engine/llama && run "$bin/llama.test" -test.count=1 -test.v -test.run "^($tests)\$") | grep -E '^(---|ok|FAIL|PASS|\s+\w+_test.go)' | tee "$out/test-engine.txt"
	(cd sidecar && run "$bin/sidecar.test" -test.count=1 -test.v -test.run "^($tests)\$") | grep -E '^(---|ok|FAIL|PASS|\s+\w+_test.go)' | tee "$out/test-sidecar.txt"
	unset CTXD_BACKEND
fi

if [[ $phase == bench || $phase == all ]]; then
	say "bench: synthetic models ($shapes)"
	for shape in $shapes; do
		case $shape in
		# Qwen2.5-0.5B's and Qwen2.5-7B's shapes, stories260K's tokenizer.
		0.5b) dims=(--layers 24 --embd 896 --heads 14 --kv-heads 2 --ffn 4864) prompt=2048 gen=64 ;;
		# The CPU is slow on 7 B: fewer tokens there keep the phase short.
		7b) dims=(--layers 28 --embd 3584 --heads 28 --kv-heads 4 --ffn 18944) prompt=512 gen=16 ;;
		*) say "unknown shape $shape"; continue ;;
		esac
		f="$pack/synth-$shape.gguf"
		[ -f "$f" ] || run "$bin/ctxctl" --no-progress gen-model --from "$CTXD_MODEL" "${dims[@]}" --ctx 32768 --out "$f"
		run "$bin/ctxctl" --no-progress bench speed --model "$f" --prompt $prompt --generate $gen --flash-attn --json | tee "$out/speed-$shape.json"
		run "$bin/ctxctl" --no-progress bench speed --model "$f" --prompt $prompt --generate $gen --kv q8_0 --json | tee "$out/speed-$shape-q8.json"
	done
fi

if [[ $phase == scale || $phase == all ]]; then
	say "scale: ${SCALE_TOKENS:-200000} tokens on the GPU"
	# eval scale's hot set is its --window (stories' 512 by default); a
	# real model's window is what a GPU hot set is for.
	run "$bin/ctxctl" --no-progress eval scale --model "$pack/synth-0.5b.gguf" --window 8192 --tokens "${SCALE_TOKENS:-200000}" --json | tee "$out/scale-0.5b.json"
fi
say "done"
