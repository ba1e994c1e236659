#!/usr/bin/env bash
# Session 18 call 4 (the session's last ~300 s of device time; steps in order of need): (1) which part of the weights-before-
# wait change pays at batch 1 (call 3: all on, 4.62 -> 4.52 ms at batch 1, 0.5% slower at 2 and 4
# streams, where only the down kernel's 2-4 token form runs); STEPSERVE_WEIGHTS_BEFORE_WAIT bits:
# 1 one-row GEMV, 2 down kernel at one token; (2) Q6_K in the fused MoE decode kernels
# (STEPSERVE_MOE_DECODE_Q6K=1): the MoE decode tests with it, Q4_K_M A/B at 1 / 2 streams, the tiny
# models' CUDA-vs-CPU tests with it (the "mix" recipe has Q6_K down matrices).
#   (timeout 200 bash bench/gpu/calls/session18-last.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model moe_gemv_cuda_test model_cuda_test || exit 1
call_test moe_gemv_cuda_test moe_q6k GTEST_FILTER='*Decode*' STEPSERVE_MOE_DECODE_Q6K=1 \
  STEPSERVE_WEIGHTS_BEFORE_WAIT=7
grep -h "moe_decode.*q6_K" "$CALL_LOGS/moe_q6k.log" | head -8
for round in 1 2; do
  for mask in 0 1 2 3; do call_ab 1 "" STEPSERVE_WEIGHTS_BEFORE_WAIT=$mask; done
done
CALL_RECIPE=q4_k_m call_ab 1,2 ""
CALL_RECIPE=q4_k_m call_ab 1,2 "" STEPSERVE_MOE_DECODE_Q6K=1
call_test model_cuda_test tiny_q6k GTEST_FILTER='*Tiny*' STEPSERVE_MOE_DECODE_Q6K=1
CALL_RECIPE=q4_k_m call_ab 1,2 ""
CALL_RECIPE=q4_k_m call_ab 1,2 "" STEPSERVE_MOE_DECODE_Q6K=1
tar -czf "$OUT/logs.tar.gz" -C "$CALL_LOGS" .
call_done
