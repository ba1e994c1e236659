#!/usr/bin/env bash
# Session 26, last call (replaces session26-final.sh after three failed starts left ~500 s): the
# GPU tests of the MoE SwiGLU written as the down GEMM's F16 activations (STEPSERVE_MOE_SWIGLU_F16=1,
# off by default until they pass) and of the session's other defaults, alternating prefill A/B of
# it, then (H200 only) the figures.
#   (timeout 500 bash bench/gpu/calls/session26-check.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model moe_gemv_cuda_test moe_cuda_test model_cuda_test stepserve || exit 1
echo "(what this call reaches comes back: the steps are in order of need)"
on=(STEPSERVE_MOE_SWIGLU_F16=1)
CALL_TEST_TIMEOUT=120 call_test moe_gemv_cuda_test moegemv "${on[@]}"
call_test moe_cuda_test moe "${on[@]}"
for round in 1 2; do
  call_ab "" 2048,4096
  call_ab "" 2048,4096 "${on[@]}"
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
