#!/usr/bin/env bash
# (Run in session 23: bench/gpu/results-v20.txt. The lean loops are the default since then, so
# to repeat this A/B build the second tree with -DSTEPSERVE_LEAN_DECODE_LOOPS=0 instead.)
# session22-second.sh cut to what a short call can hold (session 23 had under 10 minutes of device
# time left after eight failed machine starts): the default and the lean build
# (STEPSERVE_LEAN_DECODE_LOOPS=1: pointer-addressed loops for every piece, clamped ring refills,
# gathered Q4_K scales), A/B at 1-64 streams in alternating order, the GEMV test of the lean
# build, the Q4_K_M mix at 1 / 2 streams, then the MoE GEMV test of the lean build. The whole-model
# test of the lean build stays for session22-second.sh, before any default changes.
#   (timeout 420 bash bench/gpu/calls/session23-short.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model || exit 1
CALL_BUILD=build-lean CALL_CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-DSTEPSERVE_LEAN_DECODE_LOOPS=1" \
  call_build bench_model gemv_cuda_test moe_gemv_cuda_test || exit 1
call_ab 1,2,4,16,64 ""
CALL_BUILD=build-lean call_ab 1,2,4,16,64 ""
CALL_BUILD=build-lean call_test gemv_cuda_test gemv-lean
CALL_BUILD=build-lean call_ab 1,2,4,16,64 ""
call_ab 1,2,4,16,64 ""
CALL_RECIPE=q4_k_m call_ab 1,2 ""
CALL_RECIPE=q4_k_m CALL_BUILD=build-lean call_ab 1,2 ""
CALL_RECIPE=q4_k_m CALL_BUILD=build-lean call_ab 1,2 ""
CALL_RECIPE=q4_k_m call_ab 1,2 ""
CALL_BUILD=build-lean CALL_TEST_TIMEOUT=120 call_test moe_gemv_cuda_test moe-lean
call_done
