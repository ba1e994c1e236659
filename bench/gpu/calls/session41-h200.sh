#!/usr/bin/env bash
# The next H200 call (needs_h200: 45 IQ4_XS layers do not fit an H100; written in session 41, not
# yet run - no H200 came): the target figures with every default and the server's F16 cache,
# Q4_K_M batch 1 and 2 / 4 streams; the MoE-GEMV test and the gate / up pair (default up to 32
# tokens since session 41) against off at 3-32 streams; the model test; a second pair round; a
# batch-1 timeline. Ordered so that a cut-off loses only the tail. With the argument `short`
# (~250 s, for the device time left after failed starts) it stops after the MoE-GEMV test; with
# `min` (~130 s) it builds bench_model only and runs the target figures.
#   (timeout 570 bash bench/gpu/calls/session41-h200.sh [short|min] > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
export CALL_BENCH_ARGS="--kv-dtype f16"  # what `stepserve serve` uses on a GPU (--kv-dtype auto)
if [[ ${1:-} == min ]]; then  # ~130 s: the bench build and the target figures only
  call_build bench_model || exit 1
  call_ab 1,4,16,64 2048
  CALL_RECIPE=q4_k_m call_ab 1 ""
  call_done
  exit 0
fi
call_build bench_model stepserve model_cuda_test moe_gemv_cuda_test || exit 1
pair=STEPSERVE_MOE_GATE_UP_PAIR
call_ab 1,4,16,64 2048,4096 STEPSERVE_ROUND=1
CALL_RECIPE=q4_k_m call_ab 1,2,4 "" STEPSERVE_ROUND=1
CALL_TEST_TIMEOUT=150 call_test moe_gemv_cuda_test moe-gemv
if [[ ${1:-} == short ]]; then
  call_done
  exit 0
fi
call_ab 3,4,8,16,32 "" $pair=0 STEPSERVE_ROUND=1
call_ab 3,4,8,16,32 "" STEPSERVE_ROUND=1
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
call_ab 3,4,8,16,32 "" STEPSERVE_ROUND=2
call_ab 3,4,8,16,32 "" $pair=0 STEPSERVE_ROUND=2
call_timeline b1 1
call_done
