#!/usr/bin/env bash
# One call for the session's two unrun changes, in case only one device call comes: the 2-3 bit
# pieces (session20-low-bit.sh without its batch-1 repeat) and the fused FFN entry
# (STEPSERVE_FFN_ENTRY=1: its GPU test and A/B at 1 / 2 / 4 streams, two rounds), and the
# pointwise tests (the prefill kernels now 4 values per thread).
# Ran as session 20 call 1 (at 6debe41); the fused FFN entry it measured was
# removed afterwards (no gain at batch 1, slower at 2-4), so this script no longer builds as is.
#   (timeout 560 bash bench/gpu/calls/session20-combined.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build gemv_cuda_test moe_gemv_cuda_test moe_cuda_test matmul_backend_cuda_test \
  ffn_entry_cuda_test pointwise_cuda_test bench_model || exit 1
call_test ffn_entry_cuda_test ffn_entry
call_test pointwise_cuda_test pointwise
call_test gemv_cuda_test gemv_low_bit GTEST_FILTER='*LowBit*'
CALL_TEST_TIMEOUT=150 call_test matmul_backend_cuda_test matmul_low_bit STEPSERVE_GEMV_LOW_BIT=1
CALL_TEST_TIMEOUT=150 call_test moe_gemv_cuda_test moe_gemv
call_test moe_cuda_test moe_backend
for round in 1 2; do
  call_ab 1,2,4 ""
  call_ab 1,2,4 "" STEPSERVE_FFN_ENTRY=1
done
for on in 0 1; do
  CALL_PRESET=step-5 CALL_LAYERS=20 CALL_RECIPE=step5-q2 call_ab 1,4,16,64 2048 \
    STEPSERVE_GEMV_LOW_BIT=$on
  CALL_TYPES=exp-gate-up=iq3_s call_ab 1,4,16,64 2048 STEPSERVE_GEMV_LOW_BIT=$on
done
tar -czf "$OUT/logs.tar.gz" -C "$CALL_LOGS" .
call_done
