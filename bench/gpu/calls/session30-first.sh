#!/usr/bin/env bash
# Session 30, first call: the figures the issue's targets are set in (on an H200 45 layers - none
# has run since session 26; an H100 runs 24) with the defaults of sessions 27-29, the whole-model
# test, then where a decode step's time goes now: ncu per-kernel GPU times of 4 decode steps of a
# 4-layer model at batch 1, 4 streams (256-token contexts) and 64 (32-token contexts; the
# contexts' fill kernels are in the table too; the last table is session 12's).
#   (timeout 520 bash bench/gpu/calls/session30-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test stepserve || exit 1
call_ab 1,4,16,64 2048,4096
CALL_RECIPE=q4_k_m call_ab 1 2048
call_ab 2,8,32 ""
model_file=$(call_model_file)
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model_file"
bench=$CALL_BUILD/bench/gpu/bench_model
for spec in 1:256 4:256 64:32; do
  batch=${spec%:*}
  timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
    "$bench" --synthetic step-3.5-flash --layers 4 --recipe iq4_xs --batches $batch \
    --decode-steps 4 --repeats 1 --context ${spec#*:} --prefill "" --layer-times=false \
    >"$OUT/ncu-b$batch.txt" 2>&1
  echo "ncu batch $batch rc=$?"
  python3 bench/gpu/ncu_kernel_table.py "$OUT/ncu-b$batch.txt" 40
done
call_done
