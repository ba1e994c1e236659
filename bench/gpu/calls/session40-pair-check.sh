#!/usr/bin/env bash
# The gate / up pair's own test case (long rows, ~128 slots: the pair must launch, at 48 CTAs a
# slot, bitwise equal to two launches) and one A/B round at 16 / 32 streams with the pair's
# default (up to 32 tokens) against STEPSERVE_MOE_GATE_UP_PAIR=0; ~90 s on an H100.
#   (timeout 110 bash bench/gpu/calls/session40-pair-check.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build moe_gemv_cuda_test bench_model || exit 1
call_test moe_gemv_cuda_test moe-gemv-pair \
  GTEST_FILTER='TypesAndTokens/MoeGemvCudaTest.MatchesReference/30:*GateUpPair*'
grep -E "^moe_gemv .*pair" "$CALL_LOGS/moe-gemv-pair.log" | head -8
export CALL_BENCH_ARGS="--kv-dtype f16"
call_ab 16,32 "" STEPSERVE_MOE_GATE_UP_PAIR=0
call_ab 16,32 ""
call_done
