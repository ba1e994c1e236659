#!/usr/bin/env bash
# Session 39's first call: session38-second.sh's tests of the tensor-core decode attention
# (STEPSERVE_ATTN_MMA_DECODE=1: the whole attention test, step graph, prefill, the whole model with
# exact mode on the scalar kernel) and the side-branch test at 9 / 16 rows
# (STEPSERVE_SIDE_SHARED_MAX_ROWS=16), then the A/B figures: the MMA attention with F32 and F16
# caches against the default, the shared expert on the side at 12 / 16 streams, the LM head's
# grouped default at 2 / 4 / 8, prefill in round 1's default run (on an H200: 45 layers, the
# target figures). Ordered so a cut-off loses only the tail (second round last).
#   (timeout 560 bash bench/gpu/calls/session39-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build attention_cuda_test prefill_attention_cuda_test step_graph_cuda_test model_cuda_test \
  concurrent_matmul_cuda_test stepserve bench_model || exit 1
mma=STEPSERVE_ATTN_MMA_DECODE
side=STEPSERVE_SIDE_SHARED_MAX_ROWS
call_test attention_cuda_test attention $mma=1
call_test step_graph_cuda_test step-graph $mma=1 $side=16
call_test prefill_attention_cuda_test prefill $mma=1
call_test concurrent_matmul_cuda_test concurrent $side=16
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model-mma \
  STEPSERVE_GPU_TEST_MODELS="$(call_model_file)" $mma=1 $side=16
# (Here session 40 ran call_serve_config, `stepserve serve`'s resolved kv_dtype: the device builds
# have no gRPC, so no serve command - it printed the usage and was removed from the call lib.)
for round in 1 2; do
  call_ab 1,4,16,64 "" $mma=1 STEPSERVE_ROUND=$round
  CALL_BENCH_ARGS="--kv-dtype f16" call_ab 1,4,16,64 "" $mma=1 STEPSERVE_ROUND=$round
  # Round 1's default run also times prefill (the target table's 2048 / 4096-token prompts).
  call_ab 1,4,16,64 "$([[ $round == 1 ]] && echo 2048,4096)" STEPSERVE_ROUND=$round
  call_ab 12,16 "" $side=16 STEPSERVE_ROUND=$round
  call_ab 12,16 "" STEPSERVE_ROUND=$round
done
call_ab 2,4,8 "" STEPSERVE_DENSE_GROUPED_HEAD=0
call_ab 2,4,8 ""
# Where 16 streams spend a step with both new paths on (the MoE-side norm's 8.8-9.8 us, the
# attention kernels' time at 3-4 CTAs a multiprocessor), against session 37's timeline.
call_timeline mma-side16 16 $mma=1 $side=16 STEPSERVE_ROUND=3
call_done
