#!/usr/bin/env bash
# session40-h200b.sh cut to ~300 s on the H200 (needs_h200; for the device time left after failed
# starts): the target figures with every default and the server's F16 cache, Q4_K_M batch 1, the
# MoE and whole-model tests with the gate / up pair default, then one round of the pair A/B.
#   (timeout 330 bash bench/gpu/calls/session40-h200-short.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model stepserve model_cuda_test moe_gemv_cuda_test || exit 1
export CALL_BENCH_ARGS="--kv-dtype f16"  # what `stepserve serve` uses on a GPU (--kv-dtype auto)
call_ab 1,4,16,64 2048,4096 STEPSERVE_ROUND=1
CALL_RECIPE=q4_k_m call_ab 1 "" STEPSERVE_ROUND=1
CALL_TEST_TIMEOUT=150 call_test moe_gemv_cuda_test moe-gemv
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
call_ab 3,4,8 "" STEPSERVE_MOE_GATE_UP_PAIR=0 STEPSERVE_ROUND=1
call_ab 3,4,8 "" STEPSERVE_ROUND=1
call_done
