#!/usr/bin/env bash
# The README's second command (and CI's): install what is missing, build, run every test.
#  1. the normal build and every ctest test (GPU tests skip themselves without a device);
#  2. the untrusted-input tests (ctest label `sanitize`) again under AddressSanitizer +
#     UndefinedBehaviorSanitizer, building only their targets;
#  3. the GGUF reader's libFuzzer target for a fixed time (FUZZ_SECONDS, default 60);
#  4. offline checks of deploy/ and helm/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs=$(nproc)
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
stage_start=$SECONDS
stage() {
  echo "== $1 (previous stage took $((SECONDS - stage_start)) s)"
  stage_start=$SECONDS
}

stage "build and test (build/)"
bash scripts/build.sh
ctest --test-dir build --output-on-failure --parallel "$jobs" --timeout 1200

stage "sanitizers (build-asan/): untrusted-input tests under ASan + UBSan"
mapfile -t sanitize_targets < <(ctest --test-dir build -N -L sanitize |
  sed -n 's/^ *Test *#[0-9]*: *//p')
if ((${#sanitize_targets[@]} == 0)); then
  echo "no tests carry the sanitize label" >&2
  exit 1
fi
cmake -S . -B build-asan "${generator[@]}" -DSTEPSERVE_SANITIZE=ON -DSTEPSERVE_CUDA=OFF \
  -DSTEPSERVE_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan --parallel "$jobs" --target stepserve "${sanitize_targets[@]}"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure --parallel "$jobs" -L sanitize --timeout 1800

if command -v clang++ >/dev/null; then
  stage "fuzzing (build-fuzz/): GGUF reader"
  CC=clang CXX=clang++ cmake -S . -B build-fuzz "${generator[@]}" -DSTEPSERVE_FUZZ=ON \
    -DSTEPSERVE_CUDA=OFF -DSTEPSERVE_BUILD_TESTS=OFF -DSTEPSERVE_BUILD_BENCH=OFF >/dev/null
  cmake --build build-fuzz --parallel "$jobs" --target fuzz_gguf_reader
  bash tests/fuzz/run-fuzzers.sh build-fuzz "${FUZZ_SECONDS:-60}"
fi

if [[ -x deploy/check.sh ]]; then
  stage "deploy checks"
  bash deploy/check.sh
fi
stage "done"
echo "test.sh: all stages passed"
