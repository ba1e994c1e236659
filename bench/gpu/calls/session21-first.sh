#!/usr/bin/env bash
# Session 21's first device call (docs/cuda-engine.md, "Next, in order (session 21)", step 0): ncu
# of the few-token expert kernels alone (the regex of session20-ncu.sh also took the one-row GEMV,
# whose dense-layer launches came first and used up the count): batch 1 (the one-token forms) and
# 4 streams (the 2-4 token forms), then the grouped GEMV at 64 streams for comparison with v14's
# profile, the figures as a baseline for the session, and the first whole-model CPU comparison of a
# file with 2-3 bit experts (on by default since session 20; its per-op tests passed): the 4-layer
# real-shape file with IQ3_S expert gate/up and Q2_K down; then the 2-3 bit grouped kernels' 128-
# register cap (STEPSERVE_GROUPED_LOW_BIT_MIN_CTAS=4, written after session 20's device time): the
# MoE tests with it and A/B at 16 / 64 streams for both low-bit mixes.
#   (timeout 560 bash bench/gpu/calls/session21-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test moe_gemv_cuda_test stepserve || exit 1
lowbit=$CALL_MODELS/flash4-lowbit.gguf
"$CALL_BUILD/server/stepserve" make-model --preset step-3.5-flash --layers 4 --recipe iq4_xs \
  --type-exp-gate-up iq3_s --type-exp-down q2_k --out "$lowbit" >"$CALL_LOGS/make-lowbit.log" 2>&1
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model_lowbit STEPSERVE_GPU_TEST_MODELS="$lowbit"
call_ncu b1-experts 'ExpertGateUpKernel|ExpertDownCombineKernel' 4 \
  "--batches 1 --decode-steps 2 --context 256"
call_ncu b4-experts 'ExpertGateUpKernel|ExpertDownCombineKernel' 4 \
  "--batches 4 --decode-steps 2 --context 256"
call_ncu b64-grouped 'GemvQ8GroupedKernel' 3 "--batches 64 --context 1 --decode-steps 2 --repeats 1"
call_ab 1,2,4,8,16,32,64 2048,4096
CALL_PRESET=step-5 CALL_LAYERS=20 CALL_RECIPE=step5-q2 call_ab 1,4,16,64 2048
CALL_TYPES=exp-gate-up=iq3_s call_ab 1,4,16,64 2048
CALL_TEST_TIMEOUT=150 call_test moe_gemv_cuda_test moe_gemv_cap4 STEPSERVE_GROUPED_LOW_BIT_MIN_CTAS=4
for cap in 1 4 1 4; do
  CALL_PRESET=step-5 CALL_LAYERS=20 CALL_RECIPE=step5-q2 call_ab 16,64 "" \
    STEPSERVE_GROUPED_LOW_BIT_MIN_CTAS=$cap
  CALL_TYPES=exp-gate-up=iq3_s call_ab 16,64 "" STEPSERVE_GROUPED_LOW_BIT_MIN_CTAS=$cap
done
call_done
