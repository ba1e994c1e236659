#!/usr/bin/env bash
# The first device call after sessions 21-22 (both ended without one after their first call):
# the two opt-in batch-1 MoE kernels written since, neither yet run on a device -
#  - ExpertDownLeanKernel (STEPSERVE_MOE_DOWN_LEAN=1, session 21): the per-token down + combine
#    with its addressing out of the item loop;
#  - ExpertGateUpRingKernel (STEPSERVE_MOE_GATE_UP_RING=N rows per warp, session 22): each warp's
#    rows in one pipeline, the arrival atomics deferred to the end of the warp;
# both host-emulated bit for bit against the default kernels (tests/cuda_emu test_moe_down,
# test_moe_gate_up). Their GPU tests (MoE, moe_cuda, the whole model against the CPU) with both on,
# ncu of both against call 1's default kernels (gate/up 35.1 us, down 25.4 us on the H100), the
# default gate/up kernel's stalls by SASS instruction (call_ncu_source: which loads or fences the
# time waits on), then A/B at 1 / 2 streams in alternating order - default on only if the tests
# pass and it is faster.
#   (timeout 560 bash bench/gpu/calls/session22-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test moe_gemv_cuda_test moe_cuda_test stepserve || exit 1
both=(STEPSERVE_MOE_DOWN_LEAN=1 STEPSERVE_MOE_GATE_UP_RING=3)
CALL_TEST_TIMEOUT=120 call_test moe_gemv_cuda_test moe_gemv "${both[@]}"
CALL_TEST_TIMEOUT=120 call_test moe_cuda_test moe "${both[@]}"
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model "${both[@]}" \
  STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
b1="--batches 1 --decode-steps 2 --context 256"
call_ncu b1-new 'ExpertDownLeanKernel|ExpertGateUpRingKernel' 2 "$b1" "${both[@]}"
call_ncu_stalls b1-stalls 'ExpertDownLeanKernel|ExpertGateUpRingKernel|ExpertGateUpKernel' 4 \
  "$b1" "${both[@]}"
call_ncu_source b1-gate-up 'ExpertGateUpKernel' "$b1"
call_ncu_source b1-gemv 'GemvIq4XsOneRowKernel' "$b1"
# A/B, alternating: default, lean down, ring gate/up at 2 / 3 rows per warp, both.
for round in 1 2; do
  call_ab 1,2 ""
  call_ab 1,2 "" STEPSERVE_MOE_DOWN_LEAN=1
  call_ab 1,2 "" STEPSERVE_MOE_GATE_UP_RING=2
  call_ab 1,2 "" STEPSERVE_MOE_GATE_UP_RING=3
  call_ab 1,2 "" "${both[@]}"
done
for setting in 0 1; do
  CALL_RECIPE=q4_k_m call_ab 1,2 "" STEPSERVE_MOE_DOWN_LEAN=$setting \
    STEPSERVE_MOE_GATE_UP_RING=$((3 * setting))
done
call_done
