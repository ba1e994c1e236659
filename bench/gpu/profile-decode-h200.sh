#!/usr/bin/env bash
# One device call: where a decode step's time goes. Builds bench_model, times 45-layer decode at
# batch 1 and 16 (with the share of the step the host spent blocked on the device), then takes
# ncu per-kernel GPU times of decode steps of a 4-layer model and sums them per step.
# Usage: [BATCHES="1 16"] [WALL=1] [CONTEXT=256] [AB_ENV="A=1"] bash bench/gpu/profile-decode-h200.sh [BUILD_DIR]
#   (CONTEXT: tokens in each sequence before the profiled steps, bench_model's default 256;
#   AB_ENV: variables set for the ncu run)
#   (logs in $OUT or ./out-h200; WALL=0 skips the 45-layer timing)
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-h200}
out=${OUT:-out-h200}
mkdir -p "$out"
start=$(date +%s)
bash scripts/bundle-deps.sh build "$build" bench_model -- -DCMAKE_BUILD_TYPE=Release \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; exit 1; }
echo "build: $(($(date +%s) - start)) s"
source <(bash scripts/bundle-deps.sh env)
bench="$build/bench/gpu/bench_model"
[[ ${WALL:-1} == 1 ]] && timeout 200 "$bench" --synthetic step-3.5-flash --layers 45 --recipe iq4_xs --batches 1,16 \
  --decode-steps 8 --prefill "" 2>"$out/wall.err" | grep -v '"layer"' | tee "$out/wall.jsonl"
for batch in ${BATCHES:-1 16}; do
  # 4 layers: load/fill kernels first, then 4 context-fill forwards, then the decode steps.
  timeout 240 env ${AB_ENV:-} ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
    "$bench" --synthetic step-3.5-flash --layers 4 --recipe iq4_xs --batches $batch \
    --decode-steps 4 --repeats 1 --context ${CONTEXT:-256} --prefill "" >"$out/ncu-b$batch.txt" 2>&1
  echo "ncu batch $batch rc=$?"
done
echo "total: $(($(date +%s) - start)) s"
