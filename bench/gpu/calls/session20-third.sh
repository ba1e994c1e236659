#!/usr/bin/env bash
# Session 20's last device call, after session20-combined.sh (call 1) found the fused MoE decode
# kernels' 2-3 bit forms reading null grid tables (illegal address; MakeGemvParams now sets them
# for every launcher): (1) the MoE tests again with the low-bit pieces on; (2) the full model test
# (the prefill's pointwise kernels and F16 conversion now 4 values per thread); (3) Step-5 shapes
# (step5-q2, 20 layers) with the switch on (off: call 1) and Step-3.5-Flash with IQ3_S expert
# gate/up on (off timed out in call 1 at batch 16); (4) the v18 figures; (5) ncu of batch 1's
# expert kernels; (6) the K-quant floor A/B; (7) bits 8 / 16 of STEPSERVE_WEIGHTS_BEFORE_WAIT.
#   (timeout 560 bash bench/gpu/calls/session20-third.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build model_cuda_test gemv_cuda_test moe_gemv_cuda_test moe_cuda_test stepserve \
  bench_model || exit 1
CALL_TEST_TIMEOUT=150 call_test moe_gemv_cuda_test moe_gemv
call_test moe_cuda_test moe_backend STEPSERVE_GEMV_LOW_BIT=1
model=$(call_model_file)
call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model"
CALL_PRESET=step-5 CALL_LAYERS=20 CALL_RECIPE=step5-q2 call_ab 1,4,16,64 2048 STEPSERVE_GEMV_LOW_BIT=1
CALL_TYPES=exp-gate-up=iq3_s call_ab 1,4,16,64 2048 STEPSERVE_GEMV_LOW_BIT=1
call_ab 1,2,4,8,16,32,64 2048,4096
CALL_RECIPE=q4_k_m call_ab 1,2,4 2048
call_ncu b1-moe 'ExpertGateUpKernel|ExpertDownCombineKernel|GemvIq4XsOneRowKernel|RmsNorm' 16 \
  "--batches 1 --decode-steps 2 --context 256"
CALL_BUILD=build-kq CALL_CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-DSTEPSERVE_MOE_DECODE_KQUANT_MIN_BLOCKS=6" \
  call_build bench_model && for round in 1 2; do
  CALL_RECIPE=q4_k_m call_ab 1,2 ""
  CALL_BUILD=build-kq CALL_RECIPE=q4_k_m call_ab 1,2 ""
done
call_test gemv_cuda_test gemv_early8 STEPSERVE_WEIGHTS_BEFORE_WAIT=11
call_ab 1 "" STEPSERVE_WEIGHTS_BEFORE_WAIT=11
call_ab 1 "" STEPSERVE_WEIGHTS_BEFORE_WAIT=19
call_ab 1 ""
tar -czf "$OUT/logs.tar.gz" -C "$CALL_LOGS" .
call_done
