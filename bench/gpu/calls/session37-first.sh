#!/usr/bin/env bash
# Session 37's first call (H200 wanted: the 45-layer target figures, none since session 26; on an
# H100 it runs 24 layers). The first GPU runs of three switches, each off by default:
#   STEPSERVE_GEMV_F32_ROWS=1    the MoE router at 2-16 rows as a cluster F32 GEMV
#   STEPSERVE_Q5K_GROUPED_F16=1  the Q5_K attention `v` projection at 9-64 rows through the dense
#                                grouped F16 GEMM (8 K slices)
#   STEPSERVE_GEMV_STREAM_ROWS=1 the Q6_K LM head at 2-8 rows through the streamed kernel
# Their tests (gemv_f32_rows, gemv_stream, matmul_backend's layout cases with the switches on);
# the figures; two alternating A/B rounds (each switch at the batches it changes); the whole-model
# test with all three on; Q4_K_M; the 16-stream timeline with all three on. Priority order: a
# timeout cuts the tail.
#   (timeout 560 bash bench/gpu/calls/session37-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model gemv_f32_rows_cuda_test gemv_stream_cuda_test matmul_backend_cuda_test \
  model_cuda_test stepserve || exit 1
router=STEPSERVE_GEMV_F32_ROWS
q5k=STEPSERVE_Q5K_GROUPED_F16
rows=STEPSERVE_GEMV_STREAM_ROWS
call_test gemv_f32_rows_cuda_test f32-rows
call_test gemv_stream_cuda_test gemv-stream
call_test matmul_backend_cuda_test matmul-layout GTEST_FILTER='MatmulCudaLayoutTest.*' \
  $router=1 $q5k=1
call_ab 1,4,16,64 2048,4096
for round in 1 2; do
  call_ab 2,4,8,12,16 "" STEPSERVE_ROUND=$round
  call_ab 4,8,16 "" $router=1
  call_ab 12,16 "" $q5k=1
  call_ab 2,4,8 "" $rows=1
done
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model-switches \
  STEPSERVE_GPU_TEST_MODELS="$(call_model_file)" $router=1 $q5k=1 $rows=1
CALL_RECIPE=q4_k_m call_ab 1 2048
call_timeline all16 "16" $router=1 $q5k=1 $rows=1
call_done
