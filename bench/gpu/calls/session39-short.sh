#!/usr/bin/env bash
# Session 39's call cut to the device time left after nine failed starts: the tests that gate the
# tensor-core decode attention's default (STEPSERVE_ATTN_MMA_DECODE=1) and the side shared expert
# at 9-16 rows (STEPSERVE_SIDE_SHARED_MAX_ROWS=16), then one A/B round of each.
#   (timeout 400 bash bench/gpu/calls/session39-short.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build attention_cuda_test step_graph_cuda_test model_cuda_test concurrent_matmul_cuda_test \
  prefill_attention_cuda_test stepserve bench_model || exit 1
mma=STEPSERVE_ATTN_MMA_DECODE
side=STEPSERVE_SIDE_SHARED_MAX_ROWS
call_test attention_cuda_test attention $mma=1
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model-mma \
  STEPSERVE_GPU_TEST_MODELS="$(call_model_file)" $mma=1 $side=16
call_test step_graph_cuda_test step-graph $mma=1 $side=16
call_test concurrent_matmul_cuda_test concurrent $side=16
# The server's --kv-dtype auto on the GPU: f16 expected.
# shellcheck disable=SC2119
call_serve_config
CALL_BENCH_ARGS="--kv-dtype f16" call_ab 1,4,16,64 "" $mma=1
call_ab 1,4,16,64 ""
call_ab 12,16 "" $side=16
call_ab 1,4,16,64 "" $mma=1
call_ab 12,16 ""
call_test prefill_attention_cuda_test prefill $mma=1
call_done
