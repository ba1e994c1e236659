#!/usr/bin/env bash
# Session 14's first device call (docs/cuda-engine.md, "Next, in order (session 14)"): the GPU
# tests of the compiled-in loop rules of session 13 (2dedc75), then the v12 figures as defaults
# and 24 CTAs per slot at 32 streams against the default 48 (only 24 was measured there); the
# wide tensor-core GEMV (17-64 rows of IQ4_XS, opt-in STEPSERVE_GEMV_MMA_WIDE=1, not run yet):
# gemv_cuda_test's WideIq4Xs cases, matmul_backend_cuda_test and model_cuda_test with it, and
# decode at 32 / 64 streams with and without it; the row loops' L2 prefetch of each warp's next
# rows (opt-in STEPSERVE_ROW_LOOP_PREFETCH=1, not run yet): moe_gemv and gemv tests and decode
# at 1, 2, 16, 64 with it.
# ~590 s with the machine start (split it in two calls if the budget allows):
#   (timeout 540 bash bench/gpu/calls/session14-first.sh > $OUT/log.txt 2>&1);
#   tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build moe_gemv_cuda_test gemv_cuda_test model_cuda_test rope_append_cuda_test \
  matmul_backend_cuda_test stepserve bench_model || exit 1
call_test rope_append_cuda_test rope
call_test gemv_cuda_test gemv
call_test moe_gemv_cuda_test moe_gemv
call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
call_test matmul_backend_cuda_test matmul_wide STEPSERVE_GEMV_MMA_WIDE=1
call_test gemv_cuda_test gemv_prefetch STEPSERVE_ROW_LOOP_PREFETCH=1 STEPSERVE_GEMV_ROW_CTAS=7
call_test moe_gemv_cuda_test moe_gemv_prefetch STEPSERVE_ROW_LOOP_PREFETCH=1 \
  STEPSERVE_GROUPED_ROW_CTAS=2
call_test model_cuda_test model_wide STEPSERVE_GPU_TEST_MODELS="$(call_model_file)" \
  STEPSERVE_GEMV_MMA_WIDE=1
call_ab 1,2 ""
call_ab 1,2 "" STEPSERVE_GEMV_ROW_CTAS=0
call_ab 1,2 ""
call_ab "" 2048,4096
call_ab 4,8,16,32,64 ""
call_ab 32 "" STEPSERVE_GROUPED_ROW_CTAS=24
call_ab 32,64 "" STEPSERVE_GEMV_MMA_WIDE=1
call_ab 1,2,16,64 "" STEPSERVE_ROW_LOOP_PREFETCH=1
call_ab 1,2,16,64 ""
call_done
