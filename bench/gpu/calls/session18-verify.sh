#!/usr/bin/env bash
# Session 18 call 2: (1) the thread-pool fix (5dd927d: a late worker could run a chunk of the
# next job a second time - the rare CPU-side mismatch): thread_pool_test and a stress of small
# back-to-back jobs with the old and the new pool on this 16-core host (.gl/tp, not in git), then
# the full model_cuda_test twice (before the fix two of its runs in four failed on the CPU side);
# (2) the defaults flipped from call 1 (early attention loads, Q4_K floor 6): attention and gemv
# tests, the full decode / prefill figures for results v17; (3) per-kernel GPU times of batch-1
# decode steps (4-layer file, ncu) for the next step.
#   (timeout 560 bash bench/gpu/calls/session18-verify.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build model_cuda_test attention_cuda_test gemv_cuda_test thread_pool_test stepserve \
  bench_model || exit 1
s=$(date +%s)
timeout 60 "$CALL_BUILD/tests/engine/base/thread_pool_test" >"$CALL_LOGS/pool.log" 2>&1
echo "thread_pool_test rc=$? $(($(date +%s) - s)) s $(grep -E '^\[  (PASSED|FAILED)' "$CALL_LOGS/pool.log" | tr '\n' ' ')"
if [[ -f .gl/tp/race.cc ]]; then
  g++ -O2 -std=c++20 -I. .gl/tp/race.cc .gl/tp/old_pool.cc -o /tmp/race_old -lpthread &&
    g++ -O2 -std=c++20 -I. .gl/tp/race.cc engine/base/thread_pool.cc -o /tmp/race_new -lpthread
  for t in 16 32; do
    echo "old: $(timeout 25 /tmp/race_old $t 200000 | tail -1)"
    echo "new: $(timeout 25 /tmp/race_new $t 200000 | tail -1)"
  done
fi
call_test attention_cuda_test attention
call_test gemv_cuda_test gemv
model=$(call_model_file)
call_test model_cuda_test model1 STEPSERVE_GPU_TEST_MODELS="$model"
call_test model_cuda_test model2 STEPSERVE_GPU_TEST_MODELS="$model"
call_ab 1,2,4,8,16,32,64 2048,4096
CALL_RECIPE=q4_k_m call_ab 1,4 2048
s=$(date +%s)
timeout 120 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum \
  --print-summary per-kernel "$CALL_BUILD/bench/gpu/bench_model" --synthetic step-3.5-flash \
  --layers 4 --recipe iq4_xs --batches 1 --decode-steps 4 --repeats 1 --context 256 --layer-times=false \
  --prefill "" >"$OUT/ncu-b1.txt" 2>&1
echo "ncu b1 rc=$? $(($(date +%s) - s)) s"
python3 bench/gpu/ncu_kernel_table.py "$OUT/ncu-b1.txt" | head -40
tar -czf "$OUT/logs.tar.gz" -C "$CALL_LOGS" .
call_done
