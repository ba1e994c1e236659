#!/usr/bin/env bash
# Session 26, first call:
#  1. prefill attention with two query heads per CTA sharing each K / V tile
#     (STEPSERVE_PREFILL_SHARED_KV=1, off by default): its GPU tests in both settings, then
#     alternating prefill A/B with F32 pages (the default) and F16 pages;
#  2. the figures the issue's targets are set in (on an H200 45 layers; an H100 runs 24);
#  3. ncu sections of one prefill attention launch per setting (F32 pages).
#   (timeout 560 bash bench/gpu/calls/session26-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model prefill_attention_cuda_test || exit 1
call_test prefill_attention_cuda_test pa0 STEPSERVE_PREFILL_SHARED_KV=0
call_test prefill_attention_cuda_test pa1 STEPSERVE_PREFILL_SHARED_KV=1
for round in 1 2; do
  call_ab "" 2048,4096 STEPSERVE_PREFILL_SHARED_KV=0
  call_ab "" 2048,4096 STEPSERVE_PREFILL_SHARED_KV=1
done
CALL_BENCH_ARGS="--kv-dtype f16" call_ab "" 2048,4096 STEPSERVE_PREFILL_SHARED_KV=0
CALL_BENCH_ARGS="--kv-dtype f16" call_ab "" 2048,4096 STEPSERVE_PREFILL_SHARED_KV=1
call_ab 1,2,4 2048,4096
call_ab 16,64 ""
CALL_RECIPE=q4_k_m call_ab 1,2,4 2048
call_ab 8,32 ""
bench=$CALL_BUILD/bench/gpu/bench_model
for shared in 0 1; do
  STEPSERVE_PREFILL_SHARED_KV=$shared timeout 100 ncu --kernel-name regex:PrefillAttentionKernel \
    --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
    --section Occupancy --section LaunchStats \
    "$bench" --synthetic step-3.5-flash --layers 4 --recipe iq4_xs --batches "" --prefill 2048 \
    --layer-times=false --repeats 1 >"$OUT/ncu-attn-shared$shared.txt" 2>&1
  echo "ncu prefill attention shared $shared rc=$?"
  grep -E "^  [A-Za-z].*\(|Duration|Throughput|Issue Slots|Eligible|Registers Per|Achieved Occupancy|Warp Cycles Per Issued" \
    "$OUT/ncu-attn-shared$shared.txt" | head -24
done
call_done
