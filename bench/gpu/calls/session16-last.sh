#!/usr/bin/env bash
# Session 16, call 7 (the last ~200 s of device time): the GPU tests of the changes after call 6 -
# the wide tensor-core GEMV limited to 32 rows (the 8-tile form removed: gemv_cuda_test,
# matmul_backend_cuda_test) and PlaceWeight copying on the backend's stream (model_cuda_test loads
# real files through it) - then the two tiny-model cases that failed once each, 3 times more.
#   (timeout 170 bash bench/gpu/calls/session16-last.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build gemv_cuda_test matmul_backend_cuda_test model_cuda_test stepserve || exit 1
model=$(call_model_file)
call_test gemv_cuda_test gemv
call_test matmul_backend_cuda_test matmul_backend
call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model"
call_test model_cuda_test tiny GTEST_FILTER='*TinyModelMatchesCpu*:*TinyModelWithF16KvCacheMatchesCpu*' GTEST_REPEAT=3
call_done
