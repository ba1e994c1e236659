#!/usr/bin/env bash
# Session 39's last try with ~270 s of device time: only the two tests that gate the tensor-core
# decode attention's default (STEPSERVE_ATTN_MMA_DECODE=1): the whole attention test and the
# whole-model test (exact mode on the scalar kernel), the latter with the side shared expert at
# 9-16 rows too (STEPSERVE_SIDE_SHARED_MAX_ROWS=16).
#   (timeout 170 bash bench/gpu/calls/session39-min.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build attention_cuda_test model_cuda_test stepserve || exit 1
call_test attention_cuda_test attention STEPSERVE_ATTN_MMA_DECODE=1
CALL_TEST_TIMEOUT=120 call_test model_cuda_test model-mma \
  STEPSERVE_GPU_TEST_MODELS="$(call_model_file)" STEPSERVE_ATTN_MMA_DECODE=1 \
  STEPSERVE_SIDE_SHARED_MAX_ROWS=16
call_done
