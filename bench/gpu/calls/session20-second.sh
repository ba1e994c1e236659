#!/usr/bin/env bash
# Session 20's second device call: (1) the fused FFN entry (residual add + RMSNorm + router GEMV +
# top-k in one kernel at 1-4 rows, kernels/moe/ffn_entry_cuda.h; off unless STEPSERVE_FFN_ENTRY=1,
# written without a device): its GPU test, the full model test with it, A/B at 1 / 2 / 4 streams;
# (2) from session19-first.sh (unrun): bits 8 / 16 of STEPSERVE_WEIGHTS_BEFORE_WAIT (tests, A/B 3
# vs 11 vs 19 at batch 1); (3) the MoE decode kernels' K-quant floor at 6 CTAs per SM (a second
# tree; Q4_K_M 1 / 2); (4) the v18 figures; (5) ncu of batch 1's expert kernels and norms.
#   (timeout 560 bash bench/gpu/calls/session20-second.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build model_cuda_test gemv_cuda_test moe_gemv_cuda_test ffn_entry_cuda_test \
  pointwise_cuda_test stepserve bench_model || exit 1
call_test ffn_entry_cuda_test ffn_entry
call_test pointwise_cuda_test pointwise
call_test gemv_cuda_test gemv_early8 STEPSERVE_WEIGHTS_BEFORE_WAIT=11
call_test moe_gemv_cuda_test moe_early16 GTEST_FILTER='*Decode*' STEPSERVE_WEIGHTS_BEFORE_WAIT=19
model=$(call_model_file)
call_test model_cuda_test model_entry STEPSERVE_GPU_TEST_MODELS="$model" STEPSERVE_FFN_ENTRY=1
for round in 1 2; do
  call_ab 1,2,4 ""
  call_ab 1,2,4 "" STEPSERVE_FFN_ENTRY=1
  call_ab 1 "" STEPSERVE_WEIGHTS_BEFORE_WAIT=11
  call_ab 1 "" STEPSERVE_WEIGHTS_BEFORE_WAIT=19
done
CALL_BUILD=build-kq CALL_CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-DSTEPSERVE_MOE_DECODE_KQUANT_MIN_BLOCKS=6" \
  call_build bench_model && for round in 1 2; do
  CALL_RECIPE=q4_k_m call_ab 1,2 ""
  CALL_BUILD=build-kq CALL_RECIPE=q4_k_m call_ab 1,2 ""
done
call_ab 1,2,4,8,16,32,64 2048,4096
CALL_RECIPE=q4_k_m call_ab 1,2,4 2048
call_ncu b1-moe 'ExpertGateUpKernel|ExpertDownCombineKernel|GemvIq4XsOneRowKernel|RmsNorm|FfnEntry' \
  16 "--batches 1 --decode-steps 2 --context 256"
tar -czf "$OUT/logs.tar.gz" -C "$CALL_LOGS" .
call_done
