#!/usr/bin/env bash
# Session 38's second call (no device time was left for it; session 39 runs it first): the GPU
# tests the tensor-core decode attention (STEPSERVE_ATTN_MMA_DECODE=1) must pass before it becomes
# the default - the whole attention test (backend scenarios at the MMA path's bound, the gate in
# the combine, the fused combine pinned to the scalar kernel), the prefill and step-graph tests,
# then the whole-model test (exact mode now keeps the scalar kernel: f32_math_only); then the
# figures with it, with the F16 cache too, and 2 / 4 / 8 streams on the LM head's new default.
#   (timeout 420 bash bench/gpu/calls/session38-second.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build attention_cuda_test prefill_attention_cuda_test step_graph_cuda_test model_cuda_test \
  stepserve bench_model || exit 1
mma=STEPSERVE_ATTN_MMA_DECODE
call_test attention_cuda_test attention $mma=1
call_test step_graph_cuda_test step-graph $mma=1
call_test prefill_attention_cuda_test prefill $mma=1
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model-mma \
  STEPSERVE_GPU_TEST_MODELS="$(call_model_file)" $mma=1
for round in 1 2; do
  call_ab 1,4,16,64 "" $mma=1 STEPSERVE_ROUND=$round
  CALL_BENCH_ARGS="--kv-dtype f16" call_ab 1,4,16,64 "" $mma=1 STEPSERVE_ROUND=$round
  call_ab 1,4,16,64 "" STEPSERVE_ROUND=$round
done
call_ab 2,4,8 "" STEPSERVE_DENSE_GROUPED_HEAD=0
call_ab 2,4,8 ""
call_done
