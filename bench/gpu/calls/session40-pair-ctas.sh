#!/usr/bin/env bash
# The gate / up pair past 8 tokens with fewer CTAs per slot (~150 s on an H100): at 16 streams the
# pair's doubled grid (2 x ~100 slots x 96 CTAs) measured +0.3%, and 48 CTAs per slot had measured
# slightly better than 96 at 16 streams before the pair (session 16). The down launches keep 96
# (STEPSERVE_GROUPED_SHORT_ROW_CTAS). Two alternating rounds at 16 / 32 / 64 streams, F16 cache.
#   (timeout 200 bash bench/gpu/calls/session40-pair-ctas.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model || exit 1
export CALL_BENCH_ARGS="--kv-dtype f16"
ctas48=(STEPSERVE_MOE_GATE_UP_PAIR=1 STEPSERVE_GROUPED_ROW_CTAS=48 STEPSERVE_GROUPED_SHORT_ROW_CTAS=96)
for round in 1 2; do
  call_ab 16,32,64 "" STEPSERVE_ROUND=$round
  call_ab 16,32,64 "" STEPSERVE_MOE_GATE_UP_PAIR=1 STEPSERVE_ROUND=$round
  call_ab 16,32,64 "" "${ctas48[@]}" STEPSERVE_ROUND=$round
done
call_done
