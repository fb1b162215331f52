#!/usr/bin/env bash
# backend.sh GPU OUTDIR: builds llama.cpp's ggml GPU backend (vulkan or cuda)
# as a loadable library from the ggml sources vendored in the Go module
# github.com/ollama/ollama, and puts it with the libggml-base it needs in
# OUTDIR (ctxd loads every backend it finds there at start).
#
# Environment:
#   GGML_MODULE_DIR  the module root (CMakeLists.txt, CMakePresets.json and
#                    ml/backend/ggml/ggml); the Makefile passes it, h200.sh
#                    passes the copy it carried.
#   CTXD_GPU_CACHE   where the patched source copy and the CMake build live
#                    between runs (default $HOME/.cache/ctxd/gpu); a second
#                    build of the same sources only relinks.
#   GPU_JOBS         parallel build jobs (default: all CPUs).
#   CUDA_ARCHITECTURES  overrides the preset's CUDA architectures (e.g. 90
#                    for an H100/H200: one target builds many times faster
#                    than the preset's twelve).
#
# The module cache is read-only and never modified: the sources are copied,
# then patched in the copy for two gaps of the vendored tree:
#   1. ggml-vulkan/vulkan-shaders/feature-tests/ is not vendored, so CMake's
#      glslc probes would see "file not found" and report every optional
#      shader extension supported; minimal probe shaders restore the test.
#   2. Vulkan headers older than 1.3.261 (Debian 12 has 1.3.239) lack
#      VK_EXT_layer_settings, used only to configure the validation layer;
#      the patch compiles that part only where the header defines it.
set -euo pipefail

gpu=${1:?usage: backend.sh vulkan|cuda OUTDIR}
out=${2:?usage: backend.sh vulkan|cuda OUTDIR}
mod=${GGML_MODULE_DIR:?set GGML_MODULE_DIR to the github.com/ollama/ollama module root}
cache=${CTXD_GPU_CACHE:-$HOME/.cache/ctxd/gpu}
jobs=${GPU_JOBS:-$(nproc)}

case "$gpu" in
vulkan) preset=Vulkan target=ggml-vulkan skip=() ;;
# The module's CMakeLists configures Vulkan whenever its headers are found,
# which fails without glslc: a CUDA build does not need it.
cuda) preset="CUDA 13" target=ggml-cuda skip=(-DCMAKE_DISABLE_FIND_PACKAGE_Vulkan=ON) ;;
*) echo "backend.sh: GPU must be vulkan or cuda, not '$gpu'" >&2; exit 2 ;;
esac
for f in CMakeLists.txt CMakePresets.json ml/backend/ggml/ggml/src/CMakeLists.txt; do
	[ -f "$mod/$f" ] || { echo "backend.sh: $mod/$f missing (GGML_MODULE_DIR wrong?)" >&2; exit 2; }
done
command -v cmake >/dev/null || { echo "backend.sh: cmake not found (.ci/setup installs it)" >&2; exit 2; }

# The copy is keyed by the module's version and this script's patch level, so
# a module upgrade gets a fresh copy and build.
patchlevel=1
version=$(basename "$(cd "$mod" && pwd)")
src="$cache/$version-p$patchlevel/src"
build="$cache/$version-p$patchlevel/build-$gpu"

if [ ! -f "$src/.ctxd-ready" ]; then
	rm -rf "$src"
	mkdir -p "$src/ml/backend/ggml"
	cp "$mod/CMakeLists.txt" "$mod/CMakePresets.json" "$src/"
	cp -r "$mod/ml/backend/ggml/ggml" "$src/ml/backend/ggml/"
	chmod -R u+w "$src"

	ft="$src/ml/backend/ggml/ggml/src/ggml-vulkan/vulkan-shaders/feature-tests"
	mkdir -p "$ft"
	probe() { printf '#version 460\n#extension %s : require\nvoid main() {}\n' "$2" >"$ft/$1.comp"; }
	probe coopmat GL_KHR_cooperative_matrix
	probe coopmat2 GL_NV_cooperative_matrix2
	probe integer_dot GL_EXT_integer_dot_product
	probe bfloat16 GL_EXT_bfloat16

	vk="$src/ml/backend/ggml/ggml/src/ggml-vulkan/ggml-vulkan.cpp"
	python3 - "$vk" <<'EOF'
import sys
p = sys.argv[1]
s = open(p).read()
start = s.index("    VkBool32 enable_best_practice = layer_settings;")
end_marker = "vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions, &layer_setting_info);\n"
end = s.index(end_marker, start) + len(end_marker)
block = s[start:end]
patched = ("#ifdef VK_EXT_layer_settings\n" + block +
           "#else\n    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions);\n#endif\n")
open(p, "w").write(s[:start] + patched + s[end:])
EOF
	touch "$src/.ctxd-ready"
fi

if [ ! -f "$build/CMakeCache.txt" ]; then
	gen=()
	command -v ninja >/dev/null && gen=(-G Ninja)
	# $ORIGIN: the backend finds libggml-base beside itself wherever OUTDIR is.
	arch=()
	[ -n "${CUDA_ARCHITECTURES:-}" ] && arch=(-DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHITECTURES")
	cmake -S "$src" -B "$build" --preset "$preset" "${gen[@]}" "${arch[@]}" "${skip[@]}" \
		-DCMAKE_BUILD_RPATH='$ORIGIN' -DCMAKE_INSTALL_RPATH='$ORIGIN'
fi
cmake --build "$build" --target "$target" -j "$jobs"

mkdir -p "$out"
lib="$build/lib/ollama"
# libggml-base comes as a SONAME link chain; copy the links and the file.
cp -P "$lib"/libggml-base.so* "$out/"
cp "$lib/lib$target.so" "$out/"
echo "backend.sh: $gpu backend in $out:" $(cd "$out" && ls)
