#!/usr/bin/env bash
# Session 27's second call: on an H200 the figures (45 layers) with the wide chunks now the default
# for IQ4_XS experts; on either card the matmul test and the 33 / 64-stream A/B of the dense
# one-slot grouped F16 GEMM (STEPSERVE_DENSE_GROUPED_F16=1), the prefill A/B of the wide chunks
# (off, default, all 8 sub-blocks unrolled), the whole-model test with the dense path, the
# 4-layer prefill per-kernel table (ncu), the MoE GEMV test with the unrolled kernel, and the table
# with the split-K router + SwiGLU F16 switches.
#   (timeout 560 bash bench/gpu/calls/session27-figures.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test moe_gemv_cuda_test matmul_backend_cuda_test || exit 1
echo "(what this call reaches comes back: the steps are in order of need)"
if [[ -z ${CALL_LAYERS:-} ]]; then  # the figures on an H200 only (45 layers)
  call_ab 1,2,4 2048,4096
  call_ab 16,64 ""
  CALL_RECIPE=q4_k_m call_ab 1,2,4 2048
  call_ab 8,32 ""
fi
dg=STEPSERVE_DENSE_GROUPED_F16=1
call_test matmul_backend_cuda_test mm "GTEST_FILTER=MatmulCudaLayoutTest.*:*_T33:*_T64" "$dg"
for round in 1 2; do
  call_ab 33,64 ""
  call_ab 33,64 "" "$dg"
done
for round in 1 2; do
  call_ab "" 2048,4096 STEPSERVE_GEMM_F16_WIDE=0
  call_ab "" 2048,4096
  call_ab "" 2048,4096 STEPSERVE_GEMM_F16_WIDE_UNROLL8=1
done
model_file=$(call_model_file)
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model_file" "$dg"
LAYERS=4 timeout 200 bash bench/gpu/profile-prefill-h200.sh "$CALL_BUILD" >"$CALL_LOGS/prefill.log" 2>&1
echo "prefill profile rc=$? $(tail -1 "$CALL_LOGS/prefill.log")"
grep -h tokens_per_s "$OUT/prefill-wall.jsonl" | head -3
python3 bench/gpu/ncu_kernel_table.py "$OUT/ncu-prefill.txt" 40
CALL_TEST_TIMEOUT=120 call_test moe_gemv_cuda_test moegemv STEPSERVE_GEMM_F16_WIDE_UNROLL8=1
# The same table with the split-K router SGEMM and the SwiGLU writing F16 (both off: within the
# A/B spread in call 1) - what their kernels take in place of the defaults'.
STEPSERVE_SGEMM_SPLIT_K=1 STEPSERVE_MOE_SWIGLU_F16=1 LAYERS=4 OUT=$OUT/sk timeout 100 \
  bash bench/gpu/profile-prefill-h200.sh "$CALL_BUILD" >"$CALL_LOGS/prefill-sk.log" 2>&1
echo "prefill profile, split-K + SwiGLU F16: rc=$? $(tail -1 "$CALL_LOGS/prefill-sk.log")"
python3 bench/gpu/ncu_kernel_table.py "$OUT/sk/ncu-prefill.txt" 40
call_done
