#!/usr/bin/env bash
# Runs every libFuzzer target built in BUILD_DIR/fuzz for SECONDS each, starting from the
# committed seed corpus (copied, so the checkout is never modified). Fails on any crash.
# Usage: bash tests/fuzz/run-fuzzers.sh BUILD_DIR SECONDS
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir=${1:?usage: run-fuzzers.sh BUILD_DIR SECONDS}
seconds=${2:?usage: run-fuzzers.sh BUILD_DIR SECONDS}
shopt -s nullglob
targets=("$build_dir"/fuzz/fuzz_*)
if ((${#targets[@]} == 0)); then
  echo "run-fuzzers.sh: no fuzz targets in $build_dir/fuzz (configure with -DSTEPSERVE_FUZZ=ON" \
    "and clang)" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for target in "${targets[@]}"; do
  [[ -x "$target" ]] || continue
  name=$(basename "$target")
  seeds="tests/fuzz/corpus/${name#fuzz_}"
  corpus="$work/$name"
  mkdir -p "$corpus" "$work/$name-artifacts"
  if [[ -d "$seeds" ]]; then cp "$seeds"/* "$corpus"/ 2>/dev/null || true; fi
  echo "== $name for ${seconds}s ($(ls "$corpus" | wc -l) seeds)"
  rc=0
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$work/$name-artifacts/" "$corpus" \
    >"$work/$name.log" 2>&1 || rc=$?
  tail -n 30 "$work/$name.log"
  if ((rc != 0)) || compgen -G "$work/$name-artifacts/*" >/dev/null; then
    echo "run-fuzzers.sh: $name failed (exit $rc)" >&2
    for f in "$work/$name-artifacts"/*; do
      cp "$f" "$build_dir/fuzz/" && echo "  kept $build_dir/fuzz/$(basename "$f")" >&2
    done
    status=1
  fi
done
exit "$status"
