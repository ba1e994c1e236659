#!/usr/bin/env bash
# Session 30, second call: the grouped GEMV's short-row (expert down) launches - a ring over the
# whole 5-block row (STEPSERVE_GROUPED_SHORT_DEPTH=5) and the default depth without spills (=4),
# both under a 4-CTA register cap, and the short-row CTAs per slot alone
# (STEPSERVE_GROUPED_SHORT_ROW_CTAS): the MoE GEMV tests of the IQ4_XS down cases (16 tokens at 2
# blocks, 48 at the real 5), then A/B at 16 / 32 / 64 streams. On an H200 first the figures at 45
# layers (none since session 26).
#   (timeout 540 bash bench/gpu/calls/session30-second.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model moe_gemv_cuda_test || exit 1
if [[ -z ${CALL_LAYERS:-} ]]; then  # an H200: the figures (45 layers)
  call_ab 1,4,16,64 2048,4096
  CALL_RECIPE=q4_k_m call_ab 1 2048
  call_ab 2,8,32 ""
fi
f=MoeGemvCudaTest.MatchesReference
for depth in 0 4 5; do
  call_test moe_gemv_cuda_test moe_d$depth "GTEST_FILTER=*$f/18:*$f/29:*$f/2" \
    STEPSERVE_GROUPED_SHORT_DEPTH=$depth
done
for round in 1 2; do
  call_ab 16,32,64 ""
  call_ab 16,32,64 "" STEPSERVE_GROUPED_SHORT_DEPTH=5
  call_ab 16,32,64 "" STEPSERVE_GROUPED_SHORT_DEPTH=4
done
call_ab 16,32,64 "" STEPSERVE_GROUPED_SHORT_DEPTH=5 STEPSERVE_GROUPED_SHORT_ROW_CTAS=192
call_ab 16,32,64 "" STEPSERVE_GROUPED_SHORT_DEPTH=5 STEPSERVE_GROUPED_SHORT_ROW_CTAS=64
call_ab 4,8 ""
call_ab 4,8 "" STEPSERVE_GROUPED_SHORT_DEPTH=5
call_done
