#!/usr/bin/env bash
# Session 17, call 5: decode attention with the GQA group spread over more CTAs where the grid is
# small (PagedAttentionCudaCtaHeads; batch 1: 64 -> 128 CTAs on full layers, 192 on SWA layers).
# attention_cuda_test (new: the same bytes at 16 / 4 / 3 / 1 heads per CTA), the tiny and file
# model comparisons, then A/B against 16 heads per CTA (the old kernel shape) and 6.
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build attention_cuda_test model_cuda_test stepserve bench_model || exit 1
model=$(call_model_file)
call_test attention_cuda_test attention
call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model"
for round in 1 2; do
  call_ab 1,2,4 ""
  call_ab 1,2,4 "" STEPSERVE_ATTN_CTA_HEADS=16
done
call_ab 1,2 "" STEPSERVE_ATTN_CTA_HEADS=6
call_ab 1,2 "" STEPSERVE_ATTN_CTA_HEADS=8
call_ncu attention 'PagedAttentionKernel|CombineSplits' 4 "--batches 1 --decode-steps 2 --context 256"
tar -czf "$OUT/logs.tar.gz" -C "$CALL_LOGS" .
call_done
