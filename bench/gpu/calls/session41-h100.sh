#!/usr/bin/env bash
# Session 41's fallback call where no H200 comes (an H100 runs 24 layers; compare only with H100
# runs; it ran at 7011ea0, and the few-row forms were removed after it): the few-row GEMV forms'
# test (STEPSERVE_GEMV_FEW_ROWS) and their A/B at 2-4 streams in two alternating rounds (IQ4_XS
# and Q4_K_M), the gate / up pair's long-row test case and its A/B at 16 / 32 streams, a 4-stream
# timeline in the early form, and the stall reasons of the 16-row tensor-core GEMV. ~350 s on an
# H100 (86 s when it ran).
#   (timeout 500 bash bench/gpu/calls/session41-h100.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model moe_gemv_cuda_test gemv_cuda_test || exit 1
export CALL_BENCH_ARGS="--kv-dtype f16"
few=STEPSERVE_GEMV_FEW_ROWS
call_test gemv_cuda_test gemv-forms GTEST_FILTER='*FewRows*:FewRowsIq4Xs/*'
for round in 1 2; do
  call_ab 2,3,4 "" $few=0 STEPSERVE_ROUND=$round
  call_ab 2,3,4 "" $few=1 STEPSERVE_ROUND=$round
  call_ab 2,3,4 "" $few=2 STEPSERVE_ROUND=$round
done
CALL_RECIPE=q4_k_m call_ab 2,4 "" $few=0
CALL_RECIPE=q4_k_m call_ab 2,4 "" $few=2
call_test moe_gemv_cuda_test moe-gemv-pair \
  GTEST_FILTER='TypesAndTokens/MoeGemvCudaTest.MatchesReference/30:*GateUpPair*'
call_ab 16,32 "" STEPSERVE_MOE_GATE_UP_PAIR=0
call_ab 16,32 "" STEPSERVE_MOE_GATE_UP_PAIR=1
call_timeline b4-few2 4 $few=2
# Why the tensor-core GEMV of 16 rows reads at ~1/3 of the copy bandwidth (16-stream timeline:
# the 4096-row projections 19.3 us for 17.8 MB): stall reasons of its first launches.
call_ncu_stalls mma16 GemvMmaIq4XsKernel 4 "--batches 16 --decode-steps 2"
call_done
