#!/usr/bin/env bash
# Session 38, first call (H200 wanted: the 45-layer target figures; on an H100 24 layers): session
# 37's unrun second call, in priority order (a timeout cuts the tail): the LM head at 2-8 rows
# through the dense grouped F16 GEMM (STEPSERVE_DENSE_GROUPED_HEAD=1, off: its matmul case, two
# alternating A/B rounds at 2 / 4 / 8 streams); the attention `v` projection's dense grouped GEMM
# on the side stream beside q / k / gate at 9-16 rows (STEPSERVE_SIDE_DENSE_MATMULS=1, off: the
# concurrent-matmul and step-graph tests with it, A/B at 12 / 16 streams); the MoE test on the new
# defaults
# (the cluster router GEMV, Q5_K's grouped F16 GEMM; the whole-model test passed with both in
# call 1); the figures on the new defaults; the KV cache in F16 against F32 at 16 / 64 streams;
# the decode attention's stall reasons under ncu at 16 streams (what bounds it, for its rewrite);
# Q4_K_M; the whole matmul test; the 4- and 64-stream timelines; the attention's ncu sections at 64.
#   (timeout 540 bash bench/gpu/calls/session38-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model matmul_backend_cuda_test moe_cuda_test step_graph_cuda_test \
  concurrent_matmul_cuda_test || exit 1
head=STEPSERVE_DENSE_GROUPED_HEAD
side=STEPSERVE_SIDE_DENSE_MATMULS
call_test matmul_backend_cuda_test matmul-head GTEST_FILTER='MatmulCudaLayoutTest.*' $head=1
call_test concurrent_matmul_cuda_test concurrent-side $side=1
for round in 1 2; do
  call_ab 2,4,8 "" $head=1 STEPSERVE_ROUND=$round
  call_ab 2,4,8,12,16 "" STEPSERVE_ROUND=$round
  call_ab 12,16 "" $side=1
done
call_test step_graph_cuda_test step-graph-side $side=1
call_test moe_cuda_test moe
call_ab 1,4,16,64 2048,4096
for round in 1 2; do
  CALL_BENCH_ARGS="--kv-dtype f16" call_ab 16,64 "" STEPSERVE_ROUND=$round
  call_ab 16,64 "" STEPSERVE_ROUND=$round
done
call_ncu_stalls attn16 PagedAttentionKernel 2 "--batches 16 --decode-steps 1 --repeats 1"
CALL_RECIPE=q4_k_m call_ab 1,4 2048
CALL_TEST_TIMEOUT=150 call_test matmul_backend_cuda_test matmul
call_timeline streams "4,64"
call_ncu attn64 PagedAttentionKernel 2 "--batches 64 --decode-steps 1 --repeats 1"
call_done
