#!/usr/bin/env bash
# Session 24, last call (about 360 s of device time left): the MoE gate/up kernel with one block
# arrival per CTA (STEPSERVE_MOE_CTA_ARRIVAL=1, StoreAndQuantizeBlockCta in moe_decode_cuda.cu)
# against one per warp, at 1 / 2 / 4 streams, alternating, then its GPU test (the decode cases of
# moe_gemv_cuda_test: the fused kernels against the reference, counters left zero) and the whole
# model if time is left.
#   (timeout 300 bash bench/gpu/calls/session24-cta.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model moe_gemv_cuda_test model_cuda_test stepserve || exit 1
for round in 1 2; do
  call_ab 1,2,4 ""
  call_ab 1,2,4 "" STEPSERVE_MOE_CTA_ARRIVAL=1
done
call_test moe_gemv_cuda_test moe_gemv GTEST_FILTER='*Decode*' STEPSERVE_MOE_CTA_ARRIVAL=1
CALL_RECIPE=q4_k_m call_ab 1,2 ""
CALL_RECIPE=q4_k_m call_ab 1,2 "" STEPSERVE_MOE_CTA_ARRIVAL=1
CALL_TEST_TIMEOUT=120 call_test model_cuda_test model STEPSERVE_MOE_CTA_ARRIVAL=1 \
  STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
call_done
