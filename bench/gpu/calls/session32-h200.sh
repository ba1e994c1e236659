#!/usr/bin/env bash
# Session 32's figures call, on an H200 if one comes (45 layers; an H100 takes 24, comparable only
# with H100 runs): the whole-model test with the new defaults (ConcurrentMatmuls and the side
# shared expert on since session 32) and the norm's weight loaded before the PDL wait (new,
# STEPSERVE_NORM_WEIGHT_EARLY; its tests: pointwise and fused-quantization) and the decode
# attention's row and page-table reads before it (new, STEPSERVE_ATTN_TABLES_BEFORE_WAIT; its
# tests: attention (with its gate and Q8 cases), step-graph), every target figure, the A/B of the two switches
# against their old default (off), of the early norm weight and of the early table reads, in
# alternating rounds on the same card, the Q4_K_M batch-1 figure, bench_gemv --quick and the
# batch-1 graph profile.
#   (timeout 560 bash bench/gpu/calls/session32-h200.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model bench_gemv model_cuda_test concurrent_matmul_cuda_test pointwise_cuda_test \
  fused_quant_cuda_test attention_cuda_test step_graph_cuda_test \
  stepserve || exit 1
call_test concurrent_matmul_cuda_test concurrent
for early in 1 0; do
  call_test pointwise_cuda_test pointwise$early STEPSERVE_NORM_WEIGHT_EARLY=$early
  call_test fused_quant_cuda_test fused$early STEPSERVE_NORM_WEIGHT_EARLY=$early
  call_test attention_cuda_test attention$early STEPSERVE_ATTN_TABLES_BEFORE_WAIT=$early
  call_test step_graph_cuda_test graph$early STEPSERVE_ATTN_TABLES_BEFORE_WAIT=$early
done
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
call_ab 1,4,16,64 2048,4096
old=(STEPSERVE_CONCURRENT_MATMULS=0 STEPSERVE_SIDE_SHARED_EXPERT=0)
for _ in 1 2; do  # two alternating rounds
  call_ab 1,2,4,8,16 ""
  call_ab 1,2,4,8,16 "" "${old[@]}"
  call_ab 1,2,4,8,16 "" STEPSERVE_NORM_WEIGHT_EARLY=0
  call_ab 1,2,4,8,16 "" STEPSERVE_ATTN_TABLES_BEFORE_WAIT=0
done
CALL_RECIPE=q4_k_m call_ab 1 2048
timeout 90 "$CALL_BUILD/bench/gpu/bench_gemv" --quick >"$CALL_LOGS/gemv.jsonl" 2>&1
echo "bench_gemv --quick rc=$?"; grep -v '"bench":"device"' "$CALL_LOGS/gemv.jsonl" | cut -c1-200
call_graph_profile step 1
call_done
