#!/usr/bin/env bash
# targets.sh TARGET... — proves that ctxd's cgo build links for x86-64 CPUs
# this machine may not be: for each -march TARGET it links cmd/ctxd (every
# cgo package: llama.cpp, ggml, ggml's CPU backend, engine/llama/amx) with
# CGO_CFLAGS/CGO_CXXFLAGS set to "-O1 -march=TARGET" (-O1: a link proof
# needs no speed, and both targets take 7.6 CPU-minutes instead of -O2's
# 12.5), runs nothing, and
# checks that ggml's AMX kernels are in the binary exactly when the compiler
# enables AMX for that target (__AMX_INT8__ and __AVX512VNNI__, ggml's own
# condition). The Makefile's build-targets calls it with CGO_CPPFLAGS set.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${GO:=go}"
out=.build/targets
mkdir -p "$out"
cc=$($GO env CXX)
for target in "$@"; do
	flags="-O1 -march=$target"
	start=$(date +%s)
	CGO_CFLAGS="$flags" CGO_CXXFLAGS="$flags" $GO build -o "$out/ctxd-$target" ./cmd/ctxd
	defs=$($cc $flags -dM -E -x c++ /dev/null)
	want=0
	if grep -q '__AMX_INT8__' <<<"$defs" && grep -q '__AVX512VNNI__' <<<"$defs"; then want=1; fi
	$GO tool nm "$out/ctxd-$target" >"$out/ctxd-$target.nm"
	have=0
	if grep -q ' T .*ggml_backend_amx_buffer_type' "$out/ctxd-$target.nm"; then have=1; fi
	if [ "$want" != "$have" ]; then
		echo "targets: -march=$target: compiler enables AMX=$want but the binary has AMX kernels=$have" >&2
		exit 1
	fi
	echo "targets: -march=$target links (AMX kernels: $have, as the compiler enables) in $(($(date +%s) - start)) s"
done
