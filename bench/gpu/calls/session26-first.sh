#!/usr/bin/env bash
# Session 26, first call (written at the end of session 25, unrun):
#  1. on an H200 (45 layers; an H100 runs 24) the figures the issue's targets are set in - last
#     taken in session 20 (results-h200-v18.txt); sessions 21-25's defaults since;
#  2. ncu sections of one prefill attention launch (PrefillAttentionKernel<128, float>, F32 pages:
#     each key / value tile loaded and converted once per query head) and of the F16-page form,
#     to tell load / convert time from the MMA and softmax work before changing it (docs
#     "Next, in order (session 26)" item 2).
#   (timeout 560 bash bench/gpu/calls/session26-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model || exit 1
call_ab 1,2,4 2048,4096
call_ab 16,64 ""
CALL_RECIPE=q4_k_m call_ab 1,2,4 2048
call_ab 8,32 ""
bench=$CALL_BUILD/bench/gpu/bench_model
for kv in f32 f16; do
  timeout 150 ncu --kernel-name regex:PrefillAttentionKernel --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats \
    "$bench" --synthetic step-3.5-flash --layers 4 --recipe iq4_xs --batches "" --prefill 2048 \
    --layer-times=false --repeats 1 --kv-dtype $kv >"$OUT/ncu-attn-$kv.txt" 2>&1
  echo "ncu prefill attention kv $kv rc=$?"
  grep -E "^  [A-Za-z].*\(|Duration|Throughput|Issue Slots|Eligible|Registers Per|Achieved Occupancy|Warp Cycles Per Issued" \
    "$OUT/ncu-attn-$kv.txt" | head -24
done
call_done
