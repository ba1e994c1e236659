#!/usr/bin/env bash
# Session 25, last call: the grouped F16 GEMM's narrow last chunks (STEPSERVE_GEMM_F16_NARROW_TAILS
# =1: a chunk of <= 16 / <= 32 pairs computes 2 / 4 of its 8 column tiles; call 3's ncu counted
# 69.1M HMMAs where a 2048-token gate launch needs 47.2M) - its MoE GPU tests, then prefill A/B
# (IQ4_XS 2048 / 4096 two alternating rounds, Q4_K_M 2048 one) - then the session's H100 figures
# with the one-arrival-per-CTA gate/up default, the whole-model test with the narrow chunks, and
# a 4-layer prefill per-kernel table with them.
#   (timeout 560 bash bench/gpu/calls/session25-final.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model moe_gemv_cuda_test moe_cuda_test model_cuda_test stepserve || exit 1
narrow=(STEPSERVE_GEMM_F16_NARROW_TAILS=1)
CALL_TEST_TIMEOUT=120 call_test moe_gemv_cuda_test moe_gemv GTEST_FILTER='MoeGemvCudaTest*' \
  "${narrow[@]}"
for round in 1 2; do
  call_ab "" 2048,4096
  call_ab "" 2048,4096 "${narrow[@]}"
done
CALL_RECIPE=q4_k_m call_ab "" 2048
CALL_RECIPE=q4_k_m call_ab "" 2048 "${narrow[@]}"
call_test moe_cuda_test moe_cuda "${narrow[@]}"
call_ab 1,2,4,8,16,32,64 ""
CALL_RECIPE=q4_k_m call_ab 1,2,4 ""
CALL_TEST_TIMEOUT=120 call_test model_cuda_test model "${narrow[@]}" \
  STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
STEPSERVE_GEMM_F16_NARROW_TAILS=1 LAYERS=4 timeout 100 bash bench/gpu/profile-prefill-h200.sh \
  "$CALL_BUILD" >"$CALL_LOGS/prefill.log" 2>&1
echo "prefill profile (narrow) rc=$?"
python3 bench/gpu/ncu_kernel_table.py "$OUT/ncu-prefill.txt" 8
call_done
