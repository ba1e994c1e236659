#!/usr/bin/env bash
# Session 30: the fused router (STEPSERVE_ROUTER_FUSED=1: the F32 router GEMV and the top-k
# selection in one launch at 1-4 rows, kernels/moe/router_gemv_cuda.cu): its test, the router
# tests of the warp-per-row kernel (its selection now shared, router_select.cuh), the whole-model
# test with it, then A/B at 1 / 2 / 4 streams (two alternating rounds). On an H200 first the
# figures at 45 layers (none since session 26).
#   (timeout 540 bash bench/gpu/calls/session30-router.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model router_logits_cuda_test pointwise_cuda_test model_cuda_test stepserve ||
  exit 1
call_test router_logits_cuda_test router
call_test pointwise_cuda_test pointwise "GTEST_FILTER=*Router*"
model_file=$(call_model_file)
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model_file" \
  STEPSERVE_ROUTER_FUSED=1
if [[ -z ${CALL_LAYERS:-} ]]; then  # an H200: the figures (45 layers)
  call_ab 1,4,16,64 2048,4096
  CALL_RECIPE=q4_k_m call_ab 1 2048
fi
for round in 1 2; do
  call_ab 1,2,4 ""
  call_ab 1,2,4 "" STEPSERVE_ROUTER_FUSED=1
done
call_done
