#!/usr/bin/env bash
# Session 27's first call: the GPU tests of three off-by-default prefill changes - the MoE SwiGLU
# written as the down GEMM's F16 activations (STEPSERVE_MOE_SWIGLU_F16=1, session 26), the
# split-K router SGEMM (STEPSERVE_SGEMM_SPLIT_K=1) and the grouped F16 GEMM's 128-pair chunks
# (STEPSERVE_GEMM_F16_WIDE=1; both session 27) - and of the q/k norm + RoPE + KV append's early
# loads (STEPSERVE_ROPE_EARLY_LOADS=1), then alternating prefill A/B, then the
# whole-model test with all three.
#   (timeout 560 bash bench/gpu/calls/session27-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
# It ran at bfe8bb3 (results-v24.txt call 1), where STEPSERVE_GEMM_F16_WIDE=1 put IQ4_XS, Q4_K and
# Q6_K experts in wide chunks; that is =2 since (=1 is now the default, IQ4_XS only), so the script
# sets 2 to test the same. The RoPE early loads were removed after this call (their variable is
# now ignored).
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model moe_gemv_cuda_test moe_cuda_test model_cuda_test matmul_backend_cuda_test \
  rope_append_cuda_test stepserve || exit 1
echo "(what this call reaches comes back: the steps are in order of need)"
sw=STEPSERVE_MOE_SWIGLU_F16=1
sk=STEPSERVE_SGEMM_SPLIT_K=1
wd=STEPSERVE_GEMM_F16_WIDE=2
re=STEPSERVE_ROPE_EARLY_LOADS=1
call_test rope_append_cuda_test rope "$re"
call_test matmul_backend_cuda_test mm "GTEST_FILTER=MatmulCudaLayoutTest.*:*F32*" "$sk"
CALL_TEST_TIMEOUT=120 call_test moe_gemv_cuda_test moegemv "$sw" "$wd"
call_test moe_cuda_test moe "$sw" "$wd"
for round in 1 2; do
  call_ab "" 2048,4096
  call_ab "" 2048,4096 "$wd"
  call_ab "" 2048,4096 "$sw" "$sk"
  call_ab "" 2048,4096 "$sw" "$sk" "$wd"
  call_ab "" 2048,4096 "$sw" "$sk" "$wd" "$re"
done
model_file=$(call_model_file)
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model_file" \
  "$sw" "$sk" "$wd" "$re"
if [[ -z ${CALL_LAYERS:-} ]]; then  # the figures on an H200 only (45 layers), all four switches on
  call_ab 1,2,4 2048,4096 "$sw" "$sk" "$wd" "$re"
  call_ab 16,64 "" "$sw" "$sk" "$wd" "$re"
  CALL_RECIPE=q4_k_m call_ab 1,2,4 2048 "$sw" "$sk" "$wd" "$re"
  call_ab 8,32 "" "$sw" "$sk" "$wd" "$re"
else  # the early RoPE loads at decode (H100, 24 layers)
  for round in 1 2; do
    call_ab 1,64 ""
    call_ab 1,64 "" "$re"
  done
fi
call_done
