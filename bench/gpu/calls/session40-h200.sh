#!/usr/bin/env bash
# Session 40's H200 call (needs_h200: 45 IQ4_XS layers do not fit an H100; there it runs 24): the
# target figures with the new defaults (tensor-core decode attention, shared expert on the side
# up to 16 rows) and the cache the server now uses on a GPU (--kv-dtype auto = f16), then the
# same with an F32 cache (session 26's setting) against session 39's defaults, then the GPU tests
# the defaults reach, then a batch-1 kernel timeline. Ordered so a cut-off loses only the tail.
#   (timeout 570 bash bench/gpu/calls/session40-h200.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model stepserve model_cuda_test attention_cuda_test step_graph_cuda_test \
  moe_cuda_test matmul_backend_cuda_test concurrent_matmul_cuda_test \
  graph_kernel_profile_cuda_test prefill_attention_cuda_test || exit 1
f16="--kv-dtype f16"
old=(STEPSERVE_ATTN_MMA_DECODE=0 STEPSERVE_SIDE_SHARED_MAX_ROWS=8)
CALL_BENCH_ARGS=$f16 call_ab 1,4,16,64 2048,4096 STEPSERVE_ROUND=1
CALL_RECIPE=q4_k_m CALL_BENCH_ARGS=$f16 call_ab 1 "" STEPSERVE_ROUND=1
call_ab 1,4,16,64 "" STEPSERVE_ROUND=1
call_ab 1,4,16,64 "" "${old[@]}" STEPSERVE_ROUND=1
CALL_BENCH_ARGS=$f16 call_ab 1,4,16,64 "" STEPSERVE_ROUND=2
call_ab 1,4,16,64 "" "${old[@]}" STEPSERVE_ROUND=2
call_ab 1,4,16,64 "" STEPSERVE_ROUND=2
for t in attention_cuda_test step_graph_cuda_test moe_cuda_test matmul_backend_cuda_test \
  concurrent_matmul_cuda_test graph_kernel_profile_cuda_test prefill_attention_cuda_test; do
  call_test "$t" "${t%_cuda_test}"
done
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
call_timeline b1 1  # F32 cache (call_timeline takes no bench flags)
call_done
