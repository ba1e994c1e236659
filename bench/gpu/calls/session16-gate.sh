#!/usr/bin/env bash
# Session 16, call 4: the head gate (and the O projection's int8 rows) in the split-K combine
# kernel (CombineSplitsGateKernel, paged_attention_cuda.cu; CudaBackend::AttentionHeadGate) - one
# launch fewer per layer where the decode attention splits. Same floats and bytes as the head gate
# kernel after the combine (attention_cuda_test's PagedAttentionCudaGateTest). Its GPU tests, the
# model against the CPU, then alternating A / B decode at 1-16 streams (B =
# STEPSERVE_ATTN_GATE_IN_COMBINE=0: the head gate kernel as before).
#   (timeout 560 bash bench/gpu/calls/session16-gate.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build attention_cuda_test fused_quant_cuda_test model_cuda_test stepserve bench_model || exit 1
model=$(call_model_file)
call_test attention_cuda_test attention
call_test fused_quant_cuda_test fused_quant
call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model"
for i in 1 2; do
  call_ab 1,2,4,8,16 ""
  call_ab 1,2,4,8,16 "" STEPSERVE_ATTN_GATE_IN_COMBINE=0
done
call_ab 32,64 2048
call_done
