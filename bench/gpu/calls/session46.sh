#!/usr/bin/env bash
# Session 46's call (written in session 45, not yet run): a second look at session 45's three new
# defaults, which one H100 round measured (bench/gpu/results-v39.txt):
#  - STEPSERVE_GROUPED_WHOLE=3: the grouped GEMV's IQ4_XS rows of 5 / 16 blocks through kernels
#    compiled for that count (16 / 32 / 64 streams -7.0% / -4.3% / -5.3%; 3-8 streams, the same
#    kernels, not measured);
#  - STEPSERVE_MOE_GATE_UP_WHOLE on (2 streams -1.8%);
#  - STEPSERVE_GEMV_MMA_8WARP_OUT: 8 warps for every output count (the GEMV alone -13% on 12288 x
#    4096 at 12-16 rows; decode within ~1%).
# Tests first, on the new defaults (moe_gemv_cuda_test now compares GROUPED_WHOLE 3 with 0 bit for
# bit; the model test had not run with 8 warps everywhere), gemv_cuda_test also with the former
# 4-warp rule (the 4-warp kernel is now reached only through the switch). Then, on an H200, the
# 45-layer target figures (none since session 26); then three alternating rounds of the new
# defaults against all three switched back, 1-64 streams (one tree: the switches are run-time).
#   mkdir -p .gl && git archive HEAD -o .gl/head.tar
#   (timeout 570 bash bench/gpu/calls/session46.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
export CALL_BENCH_ARGS="--kv-dtype f16"  # what `stepserve serve` uses on a GPU (--kv-dtype auto)
old=(STEPSERVE_GROUPED_WHOLE=0 STEPSERVE_MOE_GATE_UP_WHOLE=0 STEPSERVE_GEMV_MMA_8WARP_OUT=8192)
call_build bench_model bench_gemv gemv_cuda_test moe_gemv_cuda_test model_cuda_test stepserve || exit 1
call_test gemv_cuda_test gemv
call_test gemv_cuda_test gemv-4warp STEPSERVE_GEMV_MMA_8WARP_OUT=8192
CALL_TEST_TIMEOUT=150 call_test moe_gemv_cuda_test moe-gemv
CALL_TEST_TIMEOUT=200 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
if [[ -z ${CALL_LAYERS:-} ]]; then  # an H200: the target figures first
  call_ab 1,4,16,64 2048
  CALL_RECIPE=q4_k_m call_ab 1 ""
fi
for round in 1 2 3; do
  # shellcheck disable=SC2154  # call_start: set by call-lib-h200.sh
  [[ $round -gt 1 && $(($(date +%s) - call_start)) -gt 450 ]] && { echo "no round $round"; break; }
  call_ab 1,2,4,8,16,32,64 "" STEPSERVE_ROUND="$round"
  call_ab 1,2,4,8,16,32,64 "" "${old[@]}" STEPSERVE_ROUND="$round"
done
call_done
