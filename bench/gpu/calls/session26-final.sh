#!/usr/bin/env bash
# Session 26, final call: the GPU tests of the session's changes with its defaults (the IQ4_XS
# dequantization kernel, 2^26-element tiles - and 2^20, which cuts the 4-layer file's matrices into
# many tiles -, the prefill head gate, two heads per prefill attention CTA, the MoE SwiGLU written
# as the down GEMM's F16 activations), alternating prefill A/B of the last
# (STEPSERVE_MOE_SWIGLU_F16=0 against the default), then the figures the issue's targets are set
# in (45 layers on an H200; an H100 runs 24).
#   (timeout 560 bash bench/gpu/calls/session26-final.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model dequant_cuda_test prefill_attention_cuda_test model_cuda_test stepserve \
  moe_gemv_cuda_test moe_cuda_test || exit 1
call_test dequant_cuda_test dq
call_test prefill_attention_cuda_test pa
for round in 1 2; do
  call_ab "" 2048,4096
  call_ab "" 2048,4096 STEPSERVE_MOE_SWIGLU_F16=0
done
call_ab 1,2,4 2048,4096
call_ab 16,64 ""
CALL_RECIPE=q4_k_m call_ab 1,2,4 2048
call_ab 8,32 ""
CALL_TEST_TIMEOUT=120 call_test moe_gemv_cuda_test moegemv
call_test moe_cuda_test moe
model_file=$(call_model_file)
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model_file"
CALL_TEST_TIMEOUT=100 call_test model_cuda_test model20 STEPSERVE_GPU_TEST_MODELS="$model_file" \
  STEPSERVE_GEMM_TILE_LOG2=20
call_done
