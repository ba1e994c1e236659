#!/usr/bin/env bash
# Session 15's second device call: the grouped expert GEMV's register cap (call 1's ncu at 64
# streams: 128 / 104 registers, 4 CTAs per SM, issue 0.61-0.63 per scheduler, no eligible warp in
# 37-38% of cycles). STEPSERVE_GROUPED_MIN_CTAS=5 (no spills), 6 and 8 (spills) against none, at
# 16 / 32 / 64 streams, the MoE GEMV tests with each, ncu of the 5-CTA form.
#   (timeout 560 bash bench/gpu/calls/session15-second.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build moe_gemv_cuda_test bench_model || exit 1
call_ab 16,32,64 ""
call_ab 16,32,64 "" STEPSERVE_GROUPED_MIN_CTAS=5
call_ab 16,32,64 "" STEPSERVE_GROUPED_MIN_CTAS=6
call_ab 16,32,64 "" STEPSERVE_GROUPED_MIN_CTAS=8
call_ab 16,32,64 ""
call_test moe_gemv_cuda_test moe_gemv5 STEPSERVE_GROUPED_MIN_CTAS=5 STEPSERVE_GROUPED_ROW_CTAS=2
call_test moe_gemv_cuda_test moe_gemv8 STEPSERVE_GROUPED_MIN_CTAS=8 STEPSERVE_GROUPED_ROW_CTAS=2
call_ncu grouped64-min5 GemvQ8GroupedKernel 3 "--batches 64 --context 1 --decode-steps 2 --repeats 1" \
  STEPSERVE_GROUPED_MIN_CTAS=5
call_done
