#!/usr/bin/env bash
# Session 21's first device call (docs/cuda-engine.md, "Next, in order (session 21)", step 0): ncu
# of the few-token expert kernels alone (the regex of session20-ncu.sh also took the one-row GEMV,
# whose dense-layer launches came first and used up the count): batch 1 (the one-token forms) and
# 4 streams (the 2-4 token forms), then the grouped GEMV at 64 streams for comparison with v14's
# profile, and the figures as a baseline for the session.
#   (timeout 560 bash bench/gpu/calls/session21-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model || exit 1
call_ncu b1-experts 'ExpertGateUpKernel|ExpertDownCombineKernel' 4 \
  "--batches 1 --decode-steps 2 --context 256"
call_ncu b4-experts 'ExpertGateUpKernel|ExpertDownCombineKernel' 4 \
  "--batches 4 --decode-steps 2 --context 256"
call_ncu b64-grouped 'GemvQ8GroupedKernel' 3 "--batches 64 --context 1 --decode-steps 2 --repeats 1"
call_ab 1,2,4,8,16,32,64 2048,4096
CALL_PRESET=step-5 CALL_LAYERS=20 CALL_RECIPE=step5-q2 call_ab 1,4,16,64 2048
CALL_TYPES=exp-gate-up=iq3_s call_ab 1,4,16,64 2048
call_done
