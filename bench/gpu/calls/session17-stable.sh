#!/usr/bin/env bash
# Session 17, call 4: the new run-to-run stability test of the 4-layer file (its 16-token prefill
# 24x on the GPU, 4x on the CPU, bit for bit) twice, then the file comparison twice (a prefill
# over the bound is now rerun on both sides and the report names the side that changed).
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build model_cuda_test stepserve || exit 1
model=$(call_model_file)
call_test model_cuda_test stable STEPSERVE_GPU_TEST_MODELS="$model" \
  GTEST_FILTER='*RunToRunStable*' GTEST_REPEAT=2
call_test model_cuda_test file1 STEPSERVE_GPU_TEST_MODELS="$model" GTEST_FILTER='*FromEnvironmentMatch*'
call_test model_cuda_test file2 STEPSERVE_GPU_TEST_MODELS="$model" GTEST_FILTER='*FromEnvironmentMatch*'
tar -czf "$OUT/logs.tar.gz" -C "$CALL_LOGS" .
call_done
