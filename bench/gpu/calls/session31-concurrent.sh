#!/usr/bin/env bash
# Session 31's second call: the two side-stream switches, written without a device -
# STEPSERVE_CONCURRENT_MATMULS=1 (ConcurrentMatmuls: attn_v's Q5_K GEMV beside the fused q/k/gate
# one) and STEPSERVE_SIDE_SHARED_EXPERT=1 (BeginSide: the MoE layers' shared expert beside the
# router, its selection and the routed experts, at 1-8 rows). Their test, the step-graph and
# whole-model tests with each on (a recorded fork and join; logits against the CPU), then their
# A/B at 1-16 streams in alternating rounds (default on only if the tests pass and it is faster),
# and the batch-1 graph profile with both on.
#   (timeout 580 bash bench/gpu/calls/session31-concurrent.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test step_graph_cuda_test concurrent_matmul_cuda_test \
  stepserve || exit 1
call_test concurrent_matmul_cuda_test concurrent
model_file=$(call_model_file)
# The defaults first: session 31 refactored paths they take (the GEMV activations' setter, the
# grouped GEMV's prologue, the model's ConcurrentMatmuls / BeginSide calls).
for switch in STEPSERVE_UNUSED=0 STEPSERVE_CONCURRENT_MATMULS=1 STEPSERVE_SIDE_SHARED_EXPERT=1; do
  call_test step_graph_cuda_test graph "$switch"
  CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model_file" \
    "$switch"
done
for _ in 1 2; do  # two alternating rounds
  call_ab 1,2,4,8,16 ""
  call_ab 1,2,4,8,16 "" STEPSERVE_CONCURRENT_MATMULS=1
  call_ab 1,2,4,8,16 "" STEPSERVE_SIDE_SHARED_EXPERT=1
  call_ab 1,2,4,8,16 "" STEPSERVE_CONCURRENT_MATMULS=1 STEPSERVE_SIDE_SHARED_EXPERT=1
done
call_graph_profile side 1 STEPSERVE_CONCURRENT_MATMULS=1 STEPSERVE_SIDE_SHARED_EXPERT=1
call_done
