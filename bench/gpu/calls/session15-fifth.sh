#!/usr/bin/env bash
# Session 15's fifth device call: the grouped IQ4_XS GEMV's loop form (register cap, exact rows)
# at every slot count (at least 48 CTAs per slot, ~6912 in all) against no loop at 3 / 4 / 8
# streams; whether call 4's model_cuda_test failure (tiny "f32" recipe, one decode row at 0.041,
# a model without IQ4_XS weights) repeats; every GPU test these changes touch; the figures.
#   (timeout 560 bash bench/gpu/calls/session15-fifth.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build gemv_cuda_test moe_gemv_cuda_test model_cuda_test matmul_backend_cuda_test \
  moe_cuda_test stepserve bench_model || exit 1
model=$(call_model_file)
call_test model_cuda_test tiny_repeat GTEST_FILTER='*Tiny*' GTEST_REPEAT=4
call_ab 3,4,8 ""
call_ab 3,4,8 "" STEPSERVE_GROUPED_ROW_CTAS=0
call_test gemv_cuda_test gemv
call_test moe_gemv_cuda_test moe_gemv
call_test matmul_backend_cuda_test matmul
call_test moe_cuda_test moe
call_ab 1,2 ""
call_ab 4,8,16,32,64 ""
call_ab "" 2048,4096
call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model"
call_done
