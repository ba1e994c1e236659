#!/usr/bin/env bash
# Session 26, third call: the IQ4_XS -> F16 dequantization kernel rewritten to one thread per 8
# values (its first form, one thread per 32, lost in call 2), its tests and the tests through it,
# alternating A/B of prefill and 64 streams against the generic kernel and against 4x larger
# dequantized tiles (STEPSERVE_GEMM_TILE_LOG2=25); then the figures with the session's defaults.
#   (timeout 560 bash bench/gpu/calls/session26-third.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model dequant_cuda_test matmul_backend_cuda_test model_cuda_test stepserve || exit 1
call_test dequant_cuda_test dq1
call_test dequant_cuda_test dq0 STEPSERVE_DEQUANT_IQ4XS_FAST=0
call_test matmul_backend_cuda_test mb
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model \
  STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
for round in 1 2; do
  call_ab 64 2048,4096
  call_ab 64 2048,4096 STEPSERVE_DEQUANT_IQ4XS_FAST=0
  call_ab 64 2048,4096 STEPSERVE_GEMM_TILE_LOG2=25
done
if [[ -z ${CALL_LAYERS:-} ]]; then  # the figures on an H200 only (45 layers)
  call_ab 1,2,4 2048,4096
  call_ab 16,64 ""
  CALL_RECIPE=q4_k_m call_ab 1,2,4 2048
  call_ab 8,32 ""
fi
call_done
