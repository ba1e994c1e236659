#!/usr/bin/env bash
# The 2-3 bit int8-activation GEMV pieces (gemv_q8x_pieces_low_bit.cuh, session 19, emulated on
# the host only; off unless STEPSERVE_GEMV_LOW_BIT=1): their GPU tests, then whole-model A/B with
# them off (exact F32 warp-per-row GEMV, host-grouped MoE) and on - Step-5 shapes in the step5-q2
# recipe (IQ2_XXS / Q2_K experts, 20 of 92 layers as in v3) and Step-3.5-Flash with IQ3_S expert
# gate/up (the community IQ4_XS card's mix: routed gate/up IQ3_S, down IQ4_XS). Turn them on by
# default only if every test passes and they are faster.
#   (timeout 560 bash bench/gpu/calls/session20-low-bit.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build gemv_cuda_test moe_gemv_cuda_test moe_cuda_test matmul_backend_cuda_test bench_model \
  || exit 1
call_test gemv_cuda_test gemv_low_bit GTEST_FILTER='*LowBit*'
# (moe_gemv_cuda_test has 21 more cases than its 48-57 s of session 13)
CALL_TEST_TIMEOUT=150 call_test matmul_backend_cuda_test matmul_low_bit STEPSERVE_GEMV_LOW_BIT=1
CALL_TEST_TIMEOUT=150 call_test moe_gemv_cuda_test moe_gemv
call_test moe_cuda_test moe_backend
# Decode 1-64 streams and a 2048-token prefill per process, the switch off (exact F32 GEMV,
# host-grouped MoE, eager steps) and on; then batch 1 again.
for on in 0 1; do
  CALL_PRESET=step-5 CALL_LAYERS=20 CALL_RECIPE=step5-q2 call_ab 1,4,16,64 2048 \
    STEPSERVE_GEMV_LOW_BIT=$on
  CALL_TYPES=exp-gate-up=iq3_s call_ab 1,4,16,64 2048 STEPSERVE_GEMV_LOW_BIT=$on
done
for on in 0 1; do
  CALL_PRESET=step-5 CALL_LAYERS=20 CALL_RECIPE=step5-q2 call_ab 1 "" STEPSERVE_GEMV_LOW_BIT=$on
  CALL_TYPES=exp-gate-up=iq3_s call_ab 1 "" STEPSERVE_GEMV_LOW_BIT=$on
done
tar -czf "$OUT/logs.tar.gz" -C "$CALL_LOGS" .
call_done
