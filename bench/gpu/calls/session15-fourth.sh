#!/usr/bin/env bash
# Session 15's fourth device call: exact-rows kernels for 2-4 activation rows of IQ4_XS in the
# plain dp4a GEMV (STEPSERVE_GEMV_EXACT_ROWS, on) and in the grouped GEMV without the row loop
# (3-15 streams; STEPSERVE_GROUPED_EXACT_ROWS, on): their tests, A/B at 2 / 3 / 4 / 8 streams,
# and the grouped row loop forced at 4 and 8 streams (lost there in session 13, before the
# register cap and the exact rows).
#   (timeout 560 bash bench/gpu/calls/session15-fourth.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build gemv_cuda_test moe_gemv_cuda_test model_cuda_test stepserve bench_model || exit 1
model=$(call_model_file)
call_test gemv_cuda_test gemv
call_test moe_gemv_cuda_test moe_gemv
call_ab 2,3,4,8 ""
call_ab 2,3,4,8 "" STEPSERVE_GEMV_EXACT_ROWS=0
call_ab 2,3,4,8 "" STEPSERVE_GROUPED_EXACT_ROWS=0
call_ab 2,3,4,8 ""
call_ab 4 "" STEPSERVE_GROUPED_ROW_CTAS=193
call_ab 8 "" STEPSERVE_GROUPED_ROW_CTAS=97
call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model"
call_done
