#!/usr/bin/env bash
# Session 17, call 6: the decode attention kernel with head_dim 128 fixed at compile time (and
# 32-bit CTA index math) - attention_cuda_test with it and without it (STEPSERVE_ATTN_FIXED_DIMS=0),
# the model comparisons, A/B at batches 1, 2, 4, ncu of the attention at batch 1, then the
# session's figures (IQ4_XS 1-64 and prefill, Q4_K_M 1 / 4 / prefill 2048).
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build attention_cuda_test model_cuda_test stepserve bench_model || exit 1
model=$(call_model_file)
call_test attention_cuda_test attention
call_test attention_cuda_test attention_generic STEPSERVE_ATTN_FIXED_DIMS=0
call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model"
for round in 1 2; do
  call_ab 1,2,4 ""
  call_ab 1,2,4 "" STEPSERVE_ATTN_FIXED_DIMS=0
done
call_ncu attention 'PagedAttentionKernel|CombineSplits' 4 "--batches 1 --decode-steps 2 --context 256"
call_ab 1,2,4,8,16,32,64 ""
call_ab "" 2048,4096
CALL_RECIPE=q4_k_m call_ab 1,4 2048
tar -czf "$OUT/logs.tar.gz" -C "$CALL_LOGS" .
call_done
