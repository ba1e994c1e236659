#!/usr/bin/env bash
# Session 17, call 7: the rare mismatch is on the CPU side (call 6: twice "CPU logits CHANGED,
# CUDA logits identical" on rerun). (1) does a CUDA load + forward change the main thread's SSE
# control word (MXCSR)? (2) the CPU backend alone, no CUDA in the process, on this 16-core host:
# the thread-count determinism test (1 vs 2 / 3 / 7 / 16 threads, bit for bit) repeated;
# (3) the full model_cuda_test once more (the order in which the failures came).
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build model_cuda_test model_step35_test stepserve || exit 1
call_test model_cuda_test mxcsr GTEST_FILTER='*FloatingPoint*'
s=$(date +%s)
timeout 60 env GTEST_FILTER='*ThreadCount*' GTEST_REPEAT=200 GTEST_BREAK_ON_FAILURE=0 \
  "$CALL_BUILD/tests/engine/model/model_step35_test" >"$CALL_LOGS/cpu_stress.log" 2>&1
echo "cpu stress rc=$? $(($(date +%s) - s)) s passed=$(grep -c '^\[  PASSED' "$CALL_LOGS/cpu_stress.log") failed=$(grep -c '^\[  FAILED  \] [0-9]' "$CALL_LOGS/cpu_stress.log")"
grep -m3 -A3 "Failure" "$CALL_LOGS/cpu_stress.log"
model=$(call_model_file)
call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model"
tar -czf "$OUT/logs.tar.gz" -C "$CALL_LOGS" .
call_done
