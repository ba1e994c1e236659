#!/usr/bin/env bash
# Session 14's first device call (docs/cuda-engine.md, "Next, in order (session 14)"), most
# important first, so that a call cut at its limit keeps what ran (the log is written as it goes):
#   1. the GPU tests of session 13's compiled-in defaults (2dedc75: the grouped GEMV's row loop
#      from 128 slots, the one-row GEMV's 2112-CTA cap) and the v12 figures as defaults;
#   2. the wide tensor-core GEMV (17-64 rows of IQ4_XS, opt-in STEPSERVE_GEMV_MMA_WIDE=1, not run
#      yet): gemv_cuda_test's WideIq4Xs cases run in step 1's gemv_cuda_test;
#      matmul_backend_cuda_test and model_cuda_test with it, decode at 32 / 64 streams;
#   3. the row loops' L2 prefetch (opt-in STEPSERVE_ROW_LOOP_PREFETCH=1, not run yet).
# ~600 s of steps: run it as
#   (timeout 560 bash bench/gpu/calls/session14-first.sh > $OUT/log.txt 2>&1);
#   tail -c 11000 $OUT/log.txt
# and run what the limit cut in a second call (each step prints one line when it ends).
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build moe_gemv_cuda_test gemv_cuda_test model_cuda_test rope_append_cuda_test \
  matmul_backend_cuda_test stepserve bench_model || exit 1
model=$(call_model_file)
call_test gemv_cuda_test gemv
call_test moe_gemv_cuda_test moe_gemv
call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model"
call_ab 1,2 ""
call_ab 1,2 "" STEPSERVE_GEMV_ROW_CTAS=0
call_ab 1,2 ""
call_ab 4,8,16,32,64 ""
call_ab "" 2048,4096
call_ab 32 "" STEPSERVE_GROUPED_ROW_CTAS=24
call_test matmul_backend_cuda_test matmul_wide STEPSERVE_GEMV_MMA_WIDE=1
call_ab 32,64 "" STEPSERVE_GEMV_MMA_WIDE=1
call_test model_cuda_test model_wide STEPSERVE_GPU_TEST_MODELS="$model" STEPSERVE_GEMV_MMA_WIDE=1
call_test gemv_cuda_test gemv_prefetch STEPSERVE_ROW_LOOP_PREFETCH=1 STEPSERVE_GEMV_ROW_CTAS=7
call_ab 1,2,16,64 "" STEPSERVE_ROW_LOOP_PREFETCH=1
call_ab 1,2,16,64 ""
call_test moe_gemv_cuda_test moe_gemv_prefetch STEPSERVE_ROW_LOOP_PREFETCH=1 \
  STEPSERVE_GROUPED_ROW_CTAS=2
call_test rope_append_cuda_test rope
call_done
