#!/usr/bin/env bash
# Session 15's third device call: the grouped IQ4_XS GEMV's register cap of 5 CTAs per SM as the
# default (call 2: 16 / 32 / 64 streams -4.0 to -4.8%) against STEPSERVE_GROUPED_MIN_CTAS=1, and
# the exact-rows dispatch (STEPSERVE_GROUPED_EXACT_ROWS=1: each chunk's dot loop compiled for its
# own group count instead of 4 guarded rows); their MoE GEMV tests; the kernels' SASS for counts.
#   (timeout 560 bash bench/gpu/calls/session15-third.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build moe_gemv_cuda_test bench_model || exit 1
obj=$CALL_BUILD/kernels/matmul/CMakeFiles/stepserve_kernel_matmul_cuda.dir/gemv_q8x_cuda.cu.o
cuobjdump -sass "$obj" 2>&1 | gzip > "${OUT:-$CALL_LOGS}/gemv_q8x-sass.txt.gz"
call_ab 16,32,64 ""
call_ab 16,32,64 "" STEPSERVE_GROUPED_EXACT_ROWS=1
call_ab 16,32,64 "" STEPSERVE_GROUPED_MIN_CTAS=1
call_ab 16,32,64 "" STEPSERVE_GROUPED_EXACT_ROWS=1 STEPSERVE_GROUPED_MIN_CTAS=1
call_ab 16,32,64 ""
call_ab 16,32,64 "" STEPSERVE_GROUPED_EXACT_ROWS=1
call_test moe_gemv_cuda_test moe_gemv STEPSERVE_GROUPED_ROW_CTAS=2
call_test moe_gemv_cuda_test moe_gemv_exact STEPSERVE_GROUPED_EXACT_ROWS=1 STEPSERVE_GROUPED_ROW_CTAS=2
call_ncu grouped64-exact GemvQ8GroupedKernel 3 "--batches 64 --context 1 --decode-steps 2 --repeats 1" \
  STEPSERVE_GROUPED_EXACT_ROWS=1
call_done
