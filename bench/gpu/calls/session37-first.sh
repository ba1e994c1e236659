#!/usr/bin/env bash
# Session 37's first call (H200 wanted: the 45-layer target figures, none since session 26; on an
# H100 it runs 24 layers): the first GPU run of the cluster F32 GEMV of 2-16 rows (the MoE router,
# STEPSERVE_GEMV_F32_ROWS) and of the several-row streamed GEMV (session 36, never run); the
# figures; two alternating A/B rounds of each switch (the router at 4 / 8 / 16 streams, the LM head
# through the streamed kernel at 2 / 4 / 8); the whole-model test with the router switch on;
# Q4_K_M; the 16-stream timeline with both on. Priority order: a timeout cuts the tail.
#   (timeout 540 bash bench/gpu/calls/session37-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model gemv_f32_rows_cuda_test gemv_stream_cuda_test model_cuda_test stepserve ||
  exit 1
call_test gemv_f32_rows_cuda_test f32-rows
call_test gemv_stream_cuda_test gemv-stream
call_ab 1,4,16,64 2048,4096
router=STEPSERVE_GEMV_F32_ROWS
rows=STEPSERVE_GEMV_STREAM_ROWS
for round in 1 2; do
  call_ab 4,8,16 "" $router=1 STEPSERVE_ROUND=$round
  call_ab 4,8,16 "" STEPSERVE_ROUND=$round
done
for round in 1 2; do
  call_ab 2,4,8 "" $rows=1 STEPSERVE_ROUND=$round
  call_ab 2,4,8 "" STEPSERVE_ROUND=$round
done
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model-router \
  STEPSERVE_GPU_TEST_MODELS="$(call_model_file)" $router=1
CALL_RECIPE=q4_k_m call_ab 1 2048
call_timeline both16 "16" $router=1 $rows=1
call_done
