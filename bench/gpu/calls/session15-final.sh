#!/usr/bin/env bash
# Session 15's last device call: the run-to-run determinism test of both backends (call 4's
# one-off TinyModelMatchesCpu failure), the GPU tests the session's changes touch at the final
# tree (the grouped GEMV now in its own file), and the figures.
#   (timeout 330 bash bench/gpu/calls/session15-final.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build gemv_cuda_test moe_gemv_cuda_test model_cuda_test matmul_backend_cuda_test \
  moe_cuda_test stepserve bench_model || exit 1
model=$(call_model_file)
call_test model_cuda_test determinism GTEST_FILTER='*Deterministic*' GTEST_REPEAT=3
call_test gemv_cuda_test gemv
call_test moe_gemv_cuda_test moe_gemv
call_test matmul_backend_cuda_test matmul
call_test moe_cuda_test moe
call_ab 1,2 ""
call_ab 3,4,8,16,32,64 ""
call_ab "" 2048,4096
call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model"
call_done
