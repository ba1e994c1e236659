#!/usr/bin/env bash
# Session 32's last call: the RMSNorm's sum of squares as explicit fused multiply-adds (the
# quantizing and plain kernels gave different bits with STEPSERVE_NORM_WEIGHT_EARLY=0 in the call
# before), its tests both ways and the whole-model test, then every target figure with the session's
# defaults, the side-stream switches against their old default once, Q4_K_M batch 1 and
# bench_gemv --quick (on an H200 if one comes: 45 layers; an H100 takes 24).
#   (timeout 480 bash bench/gpu/calls/session32-verify.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model bench_gemv model_cuda_test pointwise_cuda_test fused_quant_cuda_test \
  stepserve || exit 1
for early in 1 0; do
  call_test pointwise_cuda_test pointwise$early STEPSERVE_NORM_WEIGHT_EARLY=$early
  call_test fused_quant_cuda_test fused$early STEPSERVE_NORM_WEIGHT_EARLY=$early
done
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
call_ab 1,4,16,64 2048,4096
call_ab 1,2,4,8,16 "" STEPSERVE_CONCURRENT_MATMULS=0 STEPSERVE_SIDE_SHARED_EXPERT=0
call_ab 1,2,4,8,16 ""
CALL_RECIPE=q4_k_m call_ab 1 2048
timeout 90 "$CALL_BUILD/bench/gpu/bench_gemv" --quick >"$CALL_LOGS/gemv.jsonl" 2>&1
echo "bench_gemv --quick rc=$?"; grep -v '"bench":"device"' "$CALL_LOGS/gemv.jsonl" | cut -c1-200
call_done
