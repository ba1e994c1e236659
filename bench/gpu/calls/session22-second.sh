#!/usr/bin/env bash
# (Its A/B ran in shortened form in session 23: session23-short.sh, bench/gpu/results-v20.txt. The
# lean loops are the default since then, so to repeat it build the second tree with
# -DSTEPSERVE_LEAN_DECODE_LOOPS=0 instead.)
# The second device call after session 22 (written without a device): a compile-time A/B of the
# lean decode loops (gemv_cuda_internal.h), both bit for bit the default kernels' arithmetic:
#  - STEPSERVE_RING_POINTERS=1: AccumulateRows / AccumulateShortRows of the 32-value sub-block
#    pieces (IQ4_XS, IQ3_S, IQ3_XXS, IQ2_XXS) addressed by advancing pointers;
#  - STEPSERVE_CLAMPED_RING_LOADS=1: the long-row loops refill their rings unconditionally, which
#    removes ptxas's per-step ring copies;
# SASS (scripts/sass.py) of the grouped IQ4_XS gate/up GEMV's 1 / 2 / 3 / 4-row chunk loops:
# 417 / 569 / 661 / 734 instructions per two steps by default, 317 / 453 / 522 / 586 with the
# pointers, 326 / 438 / 500 / 562 with both (the down GEMV's 1-4-pair chunks 415 / 586 / 656 / 778
# -> 323 / 448 / 489 / 547); the 16-row GEMV's loop 1764 -> 1341; the batch-1 gate/up loop
# 400 -> 321. The pointers-only build (session 22's plan) is left out to leave device time for
# session22-first.sh right after. (The prefill per-kernel table moved to session23-prefill.sh: with it this call
# outran its limit.)
#   (timeout 560 bash bench/gpu/calls/session22-second.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model stepserve || exit 1
model_file=$(call_model_file)  # made by the default build's stepserve
# STEPSERVE_LEAN_DECODE_LOOPS=1: both switches.
CALL_BUILD=build-lean CALL_CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-DSTEPSERVE_LEAN_DECODE_LOOPS=1" \
  call_build bench_model gemv_cuda_test moe_gemv_cuda_test model_cuda_test || exit 1
# Ordered so that a call cut short by the session's device time still brings the first A/B round.
call_ab 1,2,4,16,64 ""
CALL_BUILD=build-lean call_ab 1,2,4,16,64 ""
CALL_BUILD=build-lean call_test gemv_cuda_test gemv-lean
# The Q4_K_M mix (since c5b26c9 the K-quant pieces take the pointer-addressed loops too).
CALL_RECIPE=q4_k_m call_ab 1,2 ""
CALL_RECIPE=q4_k_m CALL_BUILD=build-lean call_ab 1,2 ""
CALL_BUILD=build-lean CALL_TEST_TIMEOUT=120 call_test moe_gemv_cuda_test moe-lean
CALL_BUILD=build-lean CALL_TEST_TIMEOUT=150 call_test model_cuda_test model-lean \
  STEPSERVE_GPU_TEST_MODELS="$model_file"
CALL_BUILD=build-lean call_ab 1,2,4,16,64 ""
call_ab 1,2,4,16,64 ""
CALL_RECIPE=q4_k_m CALL_BUILD=build-lean call_ab 1,2 ""
CALL_RECIPE=q4_k_m call_ab 1,2 ""
call_done
