#!/usr/bin/env bash
# Session 25, first call (written at the end of session 24, unrun):
#  1. the tensor-core grouped GEMV for decode batches (STEPSERVE_GROUPED_MMA_DECODE=1,
#     GemvMmaIq4XsDecodeGroupedKernel: host-emulated only) - the GPU tests that reach the grouped
#     expert GEMV (MoE GEMV, matmul backend, GEMV, whole model) with it, then A/B against the dp4a
#     grouped GEMV at 8 / 16 / 32 / 64 streams, alternating, two rounds (on by default only if the
#     tests pass and it is faster);
#  2. the one-arrival-per-CTA gate/up kernel (STEPSERVE_MOE_CTA_ARRIVAL=1) with more rounds at 1 / 2
#     streams (session 24: within the spread on the H100);
#  3. on an H200 the v21 figures (45 layers; an H100 runs 24, comparable only with H100 runs).
#   (timeout 560 bash bench/gpu/calls/session25-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model moe_gemv_cuda_test matmul_backend_cuda_test gemv_cuda_test \
  model_cuda_test stepserve || exit 1
mma=(STEPSERVE_GROUPED_MMA_DECODE=1)
# The kernel's first GPU run: its MoE GEMV test before any timing, so a wrong kernel shows first.
CALL_TEST_TIMEOUT=120 call_test moe_gemv_cuda_test moe_gemv_first "${mma[@]}"
for round in 1 2; do
  call_ab 8,16,32,64 ""
  call_ab 8,16,32,64 "" "${mma[@]}"
done
CALL_TEST_TIMEOUT=120 call_test moe_gemv_cuda_test moe_gemv "${mma[@]}"
call_test matmul_backend_cuda_test matmul_backend "${mma[@]}"
call_test gemv_cuda_test gemv "${mma[@]}"
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model "${mma[@]}" \
  STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
call_ab 64 "" STEPSERVE_GROUPED_MMA_DECODE=8
call_ab 64 "" STEPSERVE_GROUPED_MMA_DECODE=48
for round in 1 2 3; do
  call_ab 1,2 ""
  call_ab 1,2 "" STEPSERVE_MOE_CTA_ARRIVAL=1
done
if [[ -z ${CALL_LAYERS:-} ]]; then
  call_ab 1,2,4,8,16,32,64 2048,4096
  CALL_RECIPE=q4_k_m call_ab 1,2,4 2048
fi
call_done
