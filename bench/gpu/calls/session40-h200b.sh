#!/usr/bin/env bash
# Session 40's H200 call after the gate / up pair became the default up to 8 tokens (needs_h200:
# 45 IQ4_XS layers; on an H100 it runs 24): the target figures with every new default and the
# server's F16 cache, Q4_K_M batch 1, then the pair against STEPSERVE_MOE_GATE_UP_PAIR=0 at 3-16
# streams (two alternating rounds), the tests it reaches, and a batch-1 timeline. Ordered so a
# cut-off loses only the tail. With the argument `short` (~300 s on the H200, for the device time
# left after failed starts): the target figures, Q4_K_M, the MoE-GEMV and model tests, one A/B
# round at 3 / 4 / 8 streams.
#   (timeout 570 bash bench/gpu/calls/session40-h200b.sh [short] > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model stepserve model_cuda_test moe_gemv_cuda_test moe_cuda_test || exit 1
export CALL_BENCH_ARGS="--kv-dtype f16"  # what `stepserve serve` uses on a GPU (--kv-dtype auto)
pair=STEPSERVE_MOE_GATE_UP_PAIR
call_ab 1,4,16,64 2048,4096 STEPSERVE_ROUND=1
CALL_RECIPE=q4_k_m call_ab 1 "" STEPSERVE_ROUND=1
if [[ ${1:-} == short ]]; then
  CALL_TEST_TIMEOUT=150 call_test moe_gemv_cuda_test moe-gemv
  CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
  call_ab 3,4,8 "" $pair=0 STEPSERVE_ROUND=1
  call_ab 3,4,8 "" STEPSERVE_ROUND=1
  call_done
  exit 0
fi
call_ab 3,4,8,16 "" $pair=0 STEPSERVE_ROUND=1
call_ab 3,4,8,16 "" STEPSERVE_ROUND=1
call_ab 3,4,8,16 "" STEPSERVE_ROUND=2
call_ab 3,4,8,16 "" $pair=0 STEPSERVE_ROUND=2
CALL_TEST_TIMEOUT=150 call_test moe_gemv_cuda_test moe-gemv
call_test moe_cuda_test moe
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
call_timeline b1 1
call_done
