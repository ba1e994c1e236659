#!/usr/bin/env bash
# Session 21's second device call, unrun (the pool closed after call 1) - the first call of session
# 22: ExpertDownLeanKernel (the per-token MoE down + combine with its addressing out of the item
# loop; STEPSERVE_MOE_DOWN_LEAN=1, off by default until this call; host-emulated bit-identical to
# the cursor form, tests/cuda_emu test_moe_down) - the MoE and whole-model tests with it, ncu of it at batch 1 against call 1's cursor form (25.4 us, 0.61 issued per
# scheduler-cycle), and A/B at 1 / 2 streams (IQ4_XS and the Q4_K_M mix, whose Q4_K down spills
# less in the lean form: 32 / 44 bytes against 48 / 50), alternating pairs.
#   (timeout 560 bash bench/gpu/calls/session21-lean-down.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test moe_gemv_cuda_test moe_cuda_test stepserve || exit 1
CALL_TEST_TIMEOUT=120 call_test moe_gemv_cuda_test moe_gemv STEPSERVE_MOE_DOWN_LEAN=1
CALL_TEST_TIMEOUT=120 call_test moe_cuda_test moe STEPSERVE_MOE_DOWN_LEAN=1
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_MOE_DOWN_LEAN=1 \
  STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
call_ncu b1-lean 'ExpertDownLeanKernel' 2 "--batches 1 --decode-steps 2 --context 256" \
  STEPSERVE_MOE_DOWN_LEAN=1
call_ncu_stalls b1-stalls 'ExpertDownLeanKernel|ExpertGateUpKernel' 4 \
  "--batches 1 --decode-steps 2 --context 256" STEPSERVE_MOE_DOWN_LEAN=1
call_ncu_stalls b1-gemv-stalls 'GemvIq4XsOneRowKernel' 4 "--batches 1 --decode-steps 2 --context 256"
# The grouped GEMV at 64 streams (call 1: 0.67 issued per scheduler-cycle, 4.8 warps per scheduler,
# ~4.8 lane instructions per weight decoded against ~2.2-2.5 for decode + dots): waiting on what.
call_ncu_stalls b64-grouped-stalls 'GemvQ8GroupedKernel' 3 \
  "--batches 64 --context 1 --decode-steps 2 --repeats 1"
for lean in 0 1 0 1; do
  call_ab 1,2 "" STEPSERVE_MOE_DOWN_LEAN=$lean
done
for lean in 0 1 0 1; do
  CALL_RECIPE=q4_k_m call_ab 1,2 "" STEPSERVE_MOE_DOWN_LEAN=$lean
done
CALL_PRESET=step-5 CALL_LAYERS=20 CALL_RECIPE=step5-q2 call_ab 1,2 "" STEPSERVE_MOE_DOWN_LEAN=0
CALL_PRESET=step-5 CALL_LAYERS=20 CALL_RECIPE=step5-q2 call_ab 1,2 "" STEPSERVE_MOE_DOWN_LEAN=1
# The session's figures with the defaults (45 layers on an H200, 24 on an H100).
call_ab 1,2,4,8,16,32,64 2048,4096
call_done
