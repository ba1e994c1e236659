#!/usr/bin/env bash
# Session 26's last call (written after three failed starts; it never ran in session 26 - no machine
# was lent): the GPU tests of the MoE SwiGLU written as the down GEMM's F16 activations
# (STEPSERVE_MOE_SWIGLU_F16=1) and of the staged dequantization kernel (STEPSERVE_DEQUANT_STAGED=1),
# both off by default until they pass, alternating A/B of each (prefill; the Q4_K_M mix's 64 streams
# and prefill for the staged kernel), then (H200 only) the figures.
#   (timeout 500 bash bench/gpu/calls/session26-check.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model moe_gemv_cuda_test moe_cuda_test model_cuda_test dequant_cuda_test stepserve ||
  exit 1
echo "(what this call reaches comes back: the steps are in order of need)"
on=(STEPSERVE_MOE_SWIGLU_F16=1)
CALL_TEST_TIMEOUT=120 call_test moe_gemv_cuda_test moegemv "${on[@]}"
call_test moe_cuda_test moe "${on[@]}"
for round in 1 2; do
  call_ab "" 2048,4096
  call_ab "" 2048,4096 "${on[@]}"
done
call_test dequant_cuda_test dq STEPSERVE_DEQUANT_STAGED=1
for round in 1 2; do
  CALL_RECIPE=q4_k_m call_ab 64 2048
  CALL_RECIPE=q4_k_m call_ab 64 2048 STEPSERVE_DEQUANT_STAGED=1
done
model_file=$(call_model_file)
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model_file" \
  "${on[@]}"
if [[ -z ${CALL_LAYERS:-} ]]; then  # the figures on an H200 only (45 layers)
  call_ab 1,2,4 2048,4096 "${on[@]}"
  call_ab 16,64 ""
  CALL_RECIPE=q4_k_m call_ab 1,2,4 2048
  call_ab 8,32 ""
fi
CALL_TEST_TIMEOUT=100 call_test model_cuda_test model20 STEPSERVE_GPU_TEST_MODELS="$model_file" \
  STEPSERVE_GEMM_TILE_LOG2=20
call_done
