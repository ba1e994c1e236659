#!/usr/bin/env bash
# Session 19's first device call (docs/cuda-engine.md, "Next, in order (session 19)"): (1) every
# default of session 18 together - the GPU tests (the weights before the wait ran its tests with all
# uses on, the Q6_K decode kernels with the decode and tiny-model tests, never the two at once);
# (2) bit 8 of STEPSERVE_WEIGHTS_BEFORE_WAIT (the other types' one-row GEMV ring before the wait,
# written after session 18's device time ran out, emulated on the host only): tests with 11, A/B
# 3 vs 11 at batch 1 for IQ4_XS and Q4_K_M; bit 16 (the gate/up kernel's shared-expert rows into L2
# before the wait) A/B 3 vs 19 at batch 1; (3) the v18 figures.
#   (timeout 560 bash bench/gpu/calls/session19-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build model_cuda_test gemv_cuda_test moe_gemv_cuda_test attention_cuda_test stepserve \
  bench_model || exit 1
call_test gemv_cuda_test gemv
call_test gemv_cuda_test gemv_early8 STEPSERVE_WEIGHTS_BEFORE_WAIT=11
call_test moe_gemv_cuda_test moe
call_test moe_gemv_cuda_test moe_early16 GTEST_FILTER='*Decode*' STEPSERVE_WEIGHTS_BEFORE_WAIT=19
call_test attention_cuda_test attention
model=$(call_model_file)
call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model"
call_test model_cuda_test model_early8 STEPSERVE_GPU_TEST_MODELS="$model" \
  STEPSERVE_WEIGHTS_BEFORE_WAIT=11
for round in 1 2; do
  call_ab 1 "" STEPSERVE_WEIGHTS_BEFORE_WAIT=3
  call_ab 1 "" STEPSERVE_WEIGHTS_BEFORE_WAIT=11
  call_ab 1 "" STEPSERVE_WEIGHTS_BEFORE_WAIT=19
  CALL_RECIPE=q4_k_m call_ab 1 "" STEPSERVE_WEIGHTS_BEFORE_WAIT=3
  CALL_RECIPE=q4_k_m call_ab 1 "" STEPSERVE_WEIGHTS_BEFORE_WAIT=11
done
call_ab 1,2,4,8,16,32,64 2048,4096
CALL_RECIPE=q4_k_m call_ab 1,2,4 2048
tar -czf "$OUT/logs.tar.gz" -C "$CALL_LOGS" .
call_done
