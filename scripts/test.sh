#!/usr/bin/env bash
# The README's second command (and CI's): install what is missing, build, run every test.
#  1. the normal build and every ctest test (GPU tests skip themselves without a device);
#  2. the untrusted-input tests again under AddressSanitizer + UndefinedBehaviorSanitizer;
#  3. the GGUF reader's libFuzzer target for a fixed time;
#  4. offline checks of deploy/ and helm/ when present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs=$(nproc)

echo "== build and test (build/)"
bash scripts/build.sh
ctest --test-dir build --output-on-failure --parallel "$jobs" --timeout 1200

echo "== sanitizers (build-asan/): untrusted-input tests under ASan + UBSan"
BUILD_DIR=build-asan bash scripts/build.sh -DSTEPSERVE_SANITIZE=ON -DSTEPSERVE_CUDA=OFF \
  -DSTEPSERVE_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure --parallel "$jobs" -L sanitize --timeout 1800

if command -v clang++ >/dev/null; then
  echo "== fuzzing (build-fuzz/): GGUF reader"
  BUILD_DIR=build-fuzz CC=clang CXX=clang++ bash scripts/build.sh -DSTEPSERVE_FUZZ=ON \
    -DSTEPSERVE_CUDA=OFF -DSTEPSERVE_BUILD_TESTS=OFF -DSTEPSERVE_BUILD_BENCH=OFF
  bash tests/fuzz/run-fuzzers.sh build-fuzz "${FUZZ_SECONDS:-60}"
fi

if [[ -x deploy/check.sh ]]; then
  echo "== deploy checks"
  bash deploy/check.sh
fi
echo "test.sh: all stages passed"
