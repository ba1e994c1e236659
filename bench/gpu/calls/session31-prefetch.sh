#!/usr/bin/env bash
# Session 31's third call: the grouped GEMV's short rows (IQ4_XS expert down at 3-64 streams) with
# the next row block prefetched (STEPSERVE_GROUPED_SHORT_PREFETCH=1: 4-CTA cap, spills 144 / 72
# bytes; =2: 3-CTA cap, 8 / 8): the MoE GEMV test's IQ4_XS down cases under both, then an
# alternating A/B against the default at 8 / 16 / 32 / 64 streams (default on only if the tests
# pass and it is faster at 16-64), and the 64-stream graph profile with the better one.
# Ran in session 32 (results-v28.txt, call 2): both levels slower, and the switch and its kernel
# were removed; the script stays as the record of that call (the switch is now ignored).
#   (timeout 580 bash bench/gpu/calls/session31-prefetch.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model moe_gemv_cuda_test || exit 1
f=MoeGemvCudaTest.MatchesReference
for level in 0 1 2; do  # 0: the default kernels (their prologue was refactored in session 31)
  call_test moe_gemv_cuda_test moe$level "GTEST_FILTER=*$f/18:*$f/29:*$f/2" \
    STEPSERVE_GROUPED_SHORT_PREFETCH=$level
done
for _ in 1 2; do  # two alternating rounds
  call_ab 8,16,32,64 ""
  call_ab 8,16,32,64 "" STEPSERVE_GROUPED_SHORT_PREFETCH=1
  call_ab 8,16,32,64 "" STEPSERVE_GROUPED_SHORT_PREFETCH=2
done
call_graph_profile prefetch 64 STEPSERVE_GROUPED_SHORT_PREFETCH=2
call_done
