#!/usr/bin/env bash
# Session 31's second call: the side-stream attention projections (STEPSERVE_CONCURRENT_MATMULS=1,
# ConcurrentMatmuls: attn_v's Q5_K GEMV beside the fused q/k/gate one) - its test, the step-graph
# and whole-model tests with it on (a recorded fork and join), then its A/B at 1-16 streams in
# alternating pairs (default on only if the tests pass and it is faster), and the graph profile at
# batch 1 with it on (is attn_v's cost gone from the step?). Then the MoE GEMV test cases session
# 30's short-row kernel touched and the 2 / 8 / 32-stream figures.
#   (timeout 580 bash bench/gpu/calls/session31-concurrent.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test moe_gemv_cuda_test step_graph_cuda_test \
  concurrent_matmul_cuda_test stepserve || exit 1
call_test concurrent_matmul_cuda_test concurrent
call_test step_graph_cuda_test graph STEPSERVE_CONCURRENT_MATMULS=1
model_file=$(call_model_file)
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model_file" \
  STEPSERVE_CONCURRENT_MATMULS=1
call_ab 1,2,4,16 "" STEPSERVE_CONCURRENT_MATMULS=1
call_ab 1,2,4,16 ""
call_ab 1,2,4,16 "" STEPSERVE_CONCURRENT_MATMULS=1
call_ab 1,2,4,16 ""
call_graph_profile concurrent 1 STEPSERVE_CONCURRENT_MATMULS=1
f=MoeGemvCudaTest.MatchesReference
call_test moe_gemv_cuda_test moe "GTEST_FILTER=*$f/18:*$f/29:*$f/2"
call_ab 2,8,32 ""
call_done
