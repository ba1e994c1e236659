#!/usr/bin/env bash
# Session 18's first device call (docs/cuda-engine.md, "Next, in order (session 18)"):
# (1) the rare mismatch is CPU-side (session 17 call 6: "CPU logits CHANGED, CUDA logits
# identical" twice): does a CUDA load + forward change the main thread's MXCSR; the CPU backend
# alone (no CUDA in the process) on this 16-core host, the thread-count determinism test 200x;
# (2) the decode attention's early loads (STEPSERVE_ATTN_EARLY_LOADS=1, written after session 17's
# device time ran out): attention_cuda_test with them, A/B at 1 / 2 / 4 streams, and the full
# model test with them (also the order in which the CPU-side failures came); (3) the Q4_K one-row
# GEMV without its spills (compile-time A/B, Q4_K_M batch 1 / 2).
#   (timeout 560 bash bench/gpu/calls/session18-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build model_cuda_test model_step35_test attention_cuda_test stepserve bench_model || exit 1
call_test model_cuda_test mxcsr GTEST_FILTER='*FloatingPoint*'
s=$(date +%s)
timeout 60 env GTEST_FILTER='*ThreadCount*' GTEST_REPEAT=200 \
  "$CALL_BUILD/tests/engine/model/model_step35_test" >"$CALL_LOGS/cpu_stress.log" 2>&1
echo "cpu stress rc=$? $(($(date +%s) - s)) s passed=$(grep -c '^\[  PASSED' "$CALL_LOGS/cpu_stress.log") failed=$(grep -c '^\[  FAILED  \] [0-9]' "$CALL_LOGS/cpu_stress.log")"
grep -m3 -A3 "Failure" "$CALL_LOGS/cpu_stress.log"
call_test attention_cuda_test attention_early STEPSERVE_ATTN_EARLY_LOADS=1
for round in 1 2; do
  call_ab 1,2,4 ""
  call_ab 1,2,4 "" STEPSERVE_ATTN_EARLY_LOADS=1
done
# (3) the Q4_K_M mix at batch 1: the Q4_K one-row GEMV spills 40 bytes under its 64-register cap;
# a second tree builds it for 6 CTAs per SM (80 registers, no spills).
CALL_BUILD=build-q4k CALL_CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-DSTEPSERVE_Q4K_ONE_ROW_MIN_BLOCKS=6" \
  call_build gemv_cuda_test bench_model || exit 1
CALL_BUILD=build-q4k call_test gemv_cuda_test gemv_q4k
for round in 1 2; do
  CALL_RECIPE=q4_k_m call_ab 1,2 ""
  CALL_BUILD=build-q4k CALL_RECIPE=q4_k_m call_ab 1,2 ""
done
model=$(call_model_file)
call_test model_cuda_test model_early STEPSERVE_GPU_TEST_MODELS="$model" STEPSERVE_ATTN_EARLY_LOADS=1
tar -czf "$OUT/logs.tar.gz" -C "$CALL_LOGS" .
call_done
