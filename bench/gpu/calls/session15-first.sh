#!/usr/bin/env bash
# Session 15's first device call, most important first (the log is written as it goes):
#   1. the wide tensor-core GEMV on by default for 17-32 rows of IQ4_XS (session 14: 32 streams
#      49.39 -> 45.99 ms, 64 streams 70.27 -> 77.65 with two chunks): gemv_cuda_test (the limit
#      setter), matmul_backend_cuda_test (17 / 32 through it, 33 / 64 through cuBLAS),
#      model_cuda_test; decode at 16 / 24 / 32 streams against STEPSERVE_GEMV_MMA_WIDE=0;
#   2. ncu sections of the grouped expert GEMV at 64 streams (decode only: --context 1 keeps the
#      context fills on the one-token MoE path), for the ring-across-rows rewrite.
#   (timeout 560 bash bench/gpu/calls/session15-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build gemv_cuda_test matmul_backend_cuda_test model_cuda_test stepserve bench_model || exit 1
model=$(call_model_file)
call_test gemv_cuda_test gemv
call_test matmul_backend_cuda_test matmul
call_ab 16,24,32 ""
call_ab 16,24,32 "" STEPSERVE_GEMV_MMA_WIDE=0
call_ncu grouped64 GemvQ8GroupedKernel 6 "--batches 64 --context 1 --decode-steps 2 --repeats 1"
call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model"
call_ab 1,2 ""
call_done
