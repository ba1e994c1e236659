#!/usr/bin/env bash
# One device call: the one-row int8 GEMV against a read-only kernel of the same bytes
# (bench_gemv --quick, streamed and warp-per-row kernels), then ncu sections (speed of light, warp
# stalls, scheduler, memory) of one IQ4_XS 4096x12288 launch of each kernel and of the read-only
# kernel, and of the tensor-core GEMV at 2 rows (bench_gemv --rows, STEPSERVE_GEMV_MMA=2), with
# the memory tables (L1 wavefronts per request: how the weight bytes reach the SM). Logs in $OUT
# (or ./out-h200); few files, since only a handful come back.
# Usage: bash bench/gpu/profile-gemv-h200.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
build=${1:-build-h200}
out=${OUT:-out-h200}
mkdir -p "$out"
bash scripts/bundle-deps.sh build "$build" bench_gemv -- -DCMAKE_BUILD_TYPE=Release \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; exit 1; }
source <(bash scripts/bundle-deps.sh env)
bench="$build/bench/gpu/bench_gemv"
for stream in 1 0; do
  echo "STEPSERVE_GEMV_STREAM=$stream"
  STEPSERVE_GEMV_STREAM=$stream timeout 60 "$bench" --quick | grep -E '"rows":1,'
done
sections=(--section SpeedOfLight --section WarpStateStats --section SchedulerStats
          --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables
          --section LaunchStats --section Occupancy --section SourceCounters)
# IQ4_XS is the first type bench_gemv runs, so the 4th launch of each kernel is an IQ4_XS one
# (ncu's -k regex matches the function name without its template arguments).
for k in GemvStreamKernel GemvQ8Kernel ReadKernel GemvMmaIq4XsKernel; do
  stream=2 mode=--quick regex=$k  # 2: always streamed (auto streams only Q6_K and huge matrices)
  [[ $k == GemvQ8Kernel ]] && stream=0
  [[ $k == GemvMmaIq4XsKernel ]] && mode=--rows
  STEPSERVE_GEMV_STREAM=$stream STEPSERVE_GEMV_MMA=2 timeout 120 ncu --clock-control none \
    --print-details all "${sections[@]}" -k "regex:$regex" --launch-skip 3 --launch-count 1 \
    "$bench" $mode >"$out/ncu-$k.txt" 2>&1
  echo "ncu $k rc=$?"
done
