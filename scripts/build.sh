#!/usr/bin/env bash
# Configures and builds stepserve into build/ (override with BUILD_DIR). Extra arguments go to
# CMake's configure step, e.g. -DSTEPSERVE_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  cmake -S . -B "$build_dir" "${generator[@]}" "$@"
elif (($# > 0)); then
  cmake -S . -B "$build_dir" "$@"
fi
cmake --build "$build_dir" --parallel "$(nproc)"
