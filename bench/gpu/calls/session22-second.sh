#!/usr/bin/env bash
# The second device call after session 22 (written without a device): a compile-time A/B of
# STEPSERVE_CLAMPED_RING_LOADS (gemv_cuda_internal.h: the long-row decode loops refill their rings
# unconditionally, which removes ptxas's ring copies - 12 MOVs per two-row step; the one-token
# gate/up loop 400 -> 364 SASS instructions per two steps, the grouped GEMV's gate/up chunk loops
# 5-6% shorter), then where a 2048-token prefill's time goes (per-kernel ncu table of a 4-layer
# file; prefill is the figure nearest its target: 7.5k vs 9k tok/s on the H200).
#   (timeout 560 bash bench/gpu/calls/session22-second.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model gemv_cuda_test moe_gemv_cuda_test || exit 1
CALL_BUILD=build-clamp CALL_CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-DSTEPSERVE_CLAMPED_RING_LOADS=1" \
  call_build bench_model gemv_cuda_test moe_gemv_cuda_test || exit 1
CALL_BUILD=build-clamp call_test gemv_cuda_test gemv-clamp
CALL_BUILD=build-clamp CALL_TEST_TIMEOUT=120 call_test moe_gemv_cuda_test moe-clamp
for round in 1 2; do
  call_ab 1,2,4,16,64 ""
  CALL_BUILD=build-clamp call_ab 1,2,4,16,64 ""
done
LAYERS=4 timeout 200 bash bench/gpu/profile-prefill-h200.sh build-h200 >"$CALL_LOGS/prefill.log" 2>&1
echo "prefill profile rc=$?"
grep -E "tokens_per_s" "${OUT:-out-h200}/prefill-wall.jsonl" | head -3
python3 bench/gpu/ncu_kernel_table.py "${OUT:-out-h200}/ncu-prefill.txt" 30
call_done
