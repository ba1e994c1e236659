#!/usr/bin/env bash
# Q6_K with 8 lanes per block (STEPSERVE_Q6K_EIGHT_LANES=1, compile time; PieceQ6_K8 in
# kernels/matmul/gemv_q8x_piece_q6k8.cuh, written in session 23 without a device): the GPU tests
# that decode Q6_K (the GEMVs, the streamed GEMV, the fused MoE kernels, the whole model) built
# with it, then A/B against the default build where Q6_K weighs: the Q4_K_M mix (attn_v and every
# ffn_down of the more-bits layers, the LM head) at 1 / 2 / 4 streams and the IQ4_XS mix at batch
# 1 (its LM head), alternating. SASS (bench/gpu/results-v20-sass.txt): the one-row Q6_K loop 383
# instructions per two steps of 16 weights per lane -> see that file for the 8-lane piece's count.
#   (timeout 560 bash bench/gpu/calls/session23-q6k8.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model stepserve || exit 1
model_file=$(call_model_file)
CALL_BUILD=build-q6k8 CALL_CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-DSTEPSERVE_Q6K_EIGHT_LANES=1" \
  call_build bench_model gemv_cuda_test gemv_stream_cuda_test moe_gemv_cuda_test model_cuda_test ||
  exit 1
CALL_RECIPE=q4_k_m call_ab 1,2,4 ""
CALL_RECIPE=q4_k_m CALL_BUILD=build-q6k8 call_ab 1,2,4 ""
CALL_BUILD=build-q6k8 call_test gemv_cuda_test gemv-q6k8
CALL_BUILD=build-q6k8 call_test gemv_stream_cuda_test stream-q6k8
CALL_BUILD=build-q6k8 CALL_TEST_TIMEOUT=120 call_test moe_gemv_cuda_test moe-q6k8
CALL_BUILD=build-q6k8 CALL_TEST_TIMEOUT=150 call_test model_cuda_test model-q6k8 \
  STEPSERVE_GPU_TEST_MODELS="$model_file"
CALL_RECIPE=q4_k_m CALL_BUILD=build-q6k8 call_ab 1,2,4 ""
CALL_RECIPE=q4_k_m call_ab 1,2,4 ""
for round in 1 2; do
  call_ab 1 ""
  CALL_BUILD=build-q6k8 call_ab 1 ""
done
call_done
