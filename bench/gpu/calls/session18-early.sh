#!/usr/bin/env bash
# Session 18 call 3: weights before the PDL wait (STEPSERVE_WEIGHTS_BEFORE_WAIT=1, off by default):
# the one-row IQ4_XS GEMV's first ring of blocks and the MoE down + combine kernel's rows (L2) and
# first blocks load before the wait. Tests with it (gemv, MoE kernels, the full model test), then
# A/B at 1 / 2 / 4 streams (the kernels it touches run at 1-4 tokens), three alternating pairs.
#   (timeout 560 bash bench/gpu/calls/session18-early.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build model_cuda_test gemv_cuda_test moe_gemv_cuda_test stepserve bench_model || exit 1
call_test gemv_cuda_test gemv_early STEPSERVE_WEIGHTS_BEFORE_WAIT=1
call_test moe_gemv_cuda_test moe_early STEPSERVE_WEIGHTS_BEFORE_WAIT=1
for round in 1 2 3; do
  call_ab 1,2,4 ""
  call_ab 1,2,4 "" STEPSERVE_WEIGHTS_BEFORE_WAIT=1
done
model=$(call_model_file)
call_test model_cuda_test model_early STEPSERVE_GPU_TEST_MODELS="$model" STEPSERVE_WEIGHTS_BEFORE_WAIT=1
tar -czf "$OUT/logs.tar.gz" -C "$CALL_LOGS" .
call_done
