#!/usr/bin/env bash
# (Ran in session 36 on an H100. STEPSERVE_GROUPED_SHORT_PIPELINE and the compile-time
# STEPSERVE_ATTN_NEXT_TABLE_EARLY switch were removed after it: docs/cuda-engine.md says why.)
# Session 36's call (H100 or H200; little device time was left after ten failed starts, so the
# steps run in priority order and a timeout cuts the tail): the first GPU run of the tests touched
# by session 35's removals (the rope in the attention, the qk-norm fold) and this session's fold of
# Backend::RopeAppendAttention into the model; the MoE GEMV test with
# STEPSERVE_GROUPED_SHORT_PIPELINE=1 (the grouped down launch's next row block loaded during this
# one's decode); the figures; two alternating A/B rounds of that switch; an A/B build of the
# attention's early next-chunk table read (STEPSERVE_ATTN_NEXT_TABLE_EARLY=0) at 64 streams (256
# keys: 4 chunks a CTA) and 16 streams at 4096 keys; the attention split rule at 16 CTAs per SM;
# Q4_K_M; the kernel timelines of 4 and 16 streams (none recorded yet).
# On an H100 it runs 24 layers (compare with H100 runs only).
#   (timeout 400 bash bench/gpu/calls/session36-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test attention_cuda_test rope_append_cuda_test \
  step_graph_cuda_test moe_gemv_cuda_test stepserve || exit 1
call_test attention_cuda_test attention
call_test rope_append_cuda_test rope-append
call_test step_graph_cuda_test step-graph
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
sp=STEPSERVE_GROUPED_SHORT_PIPELINE
call_test moe_gemv_cuda_test moe-pipeline GTEST_FILTER='TypesAndTokens/*' $sp=1
call_ab 1,4,16,64 2048
call_ab 4,16,32,64 "" $sp=1
call_ab 4,16,32,64 ""
call_ab 4,16,32,64 "" $sp=1
call_ab 4,16,32,64 ""
# The attention's next-chunk table read (session 36, default) against a build without it.
CALL_BUILD=build-b CALL_CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-DSTEPSERVE_ATTN_NEXT_TABLE_EARLY=0" \
  call_build bench_model || exit 1
for round in 1 2; do
  for b in build-h200 build-b; do
    CALL_BUILD=$b call_ab 64 "" STEPSERVE_ROUND=$round
    CALL_BUILD=$b CALL_BENCH_ARGS="--context 4096" call_ab 16 ""
  done
done
call_ab 16,64 "" STEPSERVE_ATTN_CTAS_PER_SM=16  # 64 streams: 4 chunks a CTA at 8 (2 splits)
CALL_RECIPE=q4_k_m call_ab 1 2048
call_timeline streams "4,16"
call_done
