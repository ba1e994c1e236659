#!/usr/bin/env bash
# Session 40's second script (for an H200, needs_h200; on an H100 it runs 24 layers): the target
# figures with the new defaults and the server's F16 cache, then the grouped gate / up GEMVs as one
# launch (STEPSERVE_MOE_GATE_UP_PAIR=1): its tests (moe_gemv_cuda_test compares it bitwise with two
# launches; the MoE and whole-model tests with it on) and two alternating A/B rounds at 3-64
# streams, then a 4-stream timeline with it. Ordered so a cut-off loses only the tail.
#   (timeout 570 bash bench/gpu/calls/session40-second.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model stepserve model_cuda_test moe_gemv_cuda_test moe_cuda_test || exit 1
export CALL_BENCH_ARGS="--kv-dtype f16"  # what `stepserve serve` uses on a GPU (--kv-dtype auto)
pair=STEPSERVE_MOE_GATE_UP_PAIR
call_ab 1,4,16,64 2048,4096 STEPSERVE_ROUND=1
CALL_RECIPE=q4_k_m call_ab 1 "" STEPSERVE_ROUND=1
CALL_TEST_TIMEOUT=150 call_test moe_gemv_cuda_test moe-gemv
call_test moe_cuda_test moe-pair $pair=1
call_ab 3,4,8,16,64 "" $pair=1 STEPSERVE_ROUND=1
call_ab 3,4,8,16,64 "" STEPSERVE_ROUND=1
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model-pair \
  STEPSERVE_GPU_TEST_MODELS="$(call_model_file)" $pair=1
call_ab 3,4,8,16,64 "" STEPSERVE_ROUND=2
call_ab 3,4,8,16,64 "" $pair=1 STEPSERVE_ROUND=2
call_timeline pair4 4 $pair=1
call_done
