#!/usr/bin/env bash
# (STEPSERVE_ARRIVE_RELEASE was removed after this call: the release form is the only one, so the
# second build of this script no longer differs.)
# Session 24, call 3: the arrival counters with a release add and an acquire fence
# (kernels/common/arrival.cuh, STEPSERVE_ARRIVE_RELEASE=1 by default: MEMBAR.ALL.GPU before the
# atomic instead of __threadfence()'s MEMBAR.SC.GPU + CCTL.IVALL around it) in the batch-1-4 MoE
# gate/up kernel and the split decode attention's combine. Their GPU tests, then A/B against a
# -DSTEPSERVE_ARRIVE_RELEASE=0 build at 1 / 2 / 4 / 16 streams, alternating; the Q4_K_M mix with
# the lean down kernel (default since this session's call 2) against STEPSERVE_MOE_DOWN_LEAN=0;
# then, on an H200, the v21 figures of the default build (45 layers). Cut to fit ~400 s: the
# MoE GEMV test runs its decode cases only.
# (Run in session 24 as calls 3-6, results-v21.txt: its first form named a target that does not
# exist, attention_q8_cuda_test, now dropped.)
#   (timeout 560 bash bench/gpu/calls/session24-second.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test moe_gemv_cuda_test moe_cuda_test attention_cuda_test \
  stepserve || exit 1
CALL_BUILD=build-fence CALL_CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-DSTEPSERVE_ARRIVE_RELEASE=0" \
  call_build bench_model || exit 1
for round in 1 2; do
  call_ab 1,2,4,16 ""
  CALL_BUILD=build-fence call_ab 1,2,4,16 ""
done
CALL_TEST_TIMEOUT=120 call_test moe_gemv_cuda_test moe_gemv GTEST_FILTER='*Decode*'
call_test moe_cuda_test moe
call_test attention_cuda_test attention
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
for round in 1 2; do
  CALL_RECIPE=q4_k_m call_ab 1,2 ""
  CALL_RECIPE=q4_k_m call_ab 1,2 "" STEPSERVE_MOE_DOWN_LEAN=0
done
# The figures on an H200 only (45 layers; an H100's 24-layer figures are in the A/B lines above).
if [[ -z ${CALL_LAYERS:-} ]]; then
  call_ab 1,2,4,8,16,32,64 2048,4096
  CALL_RECIPE=q4_k_m call_ab 1,2,4 2048
fi
call_done
