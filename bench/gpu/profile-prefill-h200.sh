#!/usr/bin/env bash
# One device call: where a prefill's time goes. Builds bench_model, times a 2048-token prefill of
# a LAYERS-layer synthetic Step-3.5-Flash (IQ4_XS mix) on the wall clock, then takes ncu per-kernel
# GPU times of the same prefill (the weight fill kernels come first in the list). The difference
# between the wall time and the GPU sum is host time (launches, host round trips).
# Usage: [LAYERS=2] [PROMPT=2048] bash bench/gpu/profile-prefill-h200.sh [BUILD_DIR]
#   (logs in $OUT or ./out-h200)
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-h200}
out=${OUT:-out-h200}
layers=${LAYERS:-2}
prompt=${PROMPT:-2048}
mkdir -p "$out"
start=$(date +%s)
bash scripts/bundle-deps.sh build "$build" bench_model -- -DCMAKE_BUILD_TYPE=Release \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; exit 1; }
echo "build: $(($(date +%s) - start)) s"
source <(bash scripts/bundle-deps.sh env)
bench="$build/bench/gpu/bench_model"
# --layer-times=false: the batch-1 layer timing pass (a 256-token context fill plus decode steps)
# would otherwise share the ncu summary with the prefill.
args=(--synthetic step-3.5-flash --layers "$layers" --recipe iq4_xs --batches "" --prefill "$prompt"
  --layer-times=false)
timeout 120 "$bench" "${args[@]}" --repeats 3 2>"$out/prefill-wall.err" | tee "$out/prefill-wall.jsonl"
timeout 300 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum \
  --print-summary per-kernel "$bench" "${args[@]}" --repeats 1 >"$out/ncu-prefill.txt" 2>&1
echo "ncu prefill rc=$?"
echo "total: $(($(date +%s) - start)) s"
# KERNEL=<regex>: ncu sections of that kernel's first launch in the prefill as well.
if [[ -n ${KERNEL:-} ]]; then
  timeout 200 ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats \
    --section Occupancy --section SourceCounters -k "regex:$KERNEL" --launch-count 1 \
    "$bench" "${args[@]}" --repeats 1 >"$out/ncu-kernel.txt" 2>&1
  echo "ncu $KERNEL rc=$?"
fi
# AB_ENV="A=1 B=2": the wall-clock prefill again with those variables set.
if [[ -n ${AB_ENV:-} ]]; then
  env $AB_ENV timeout 120 "$bench" "${args[@]}" --repeats 3 2>>"$out/prefill-wall.err" |
    grep prefill | sed "s/^/$AB_ENV /"
fi
