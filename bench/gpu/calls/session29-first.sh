#!/usr/bin/env bash
# Session 29's first call: the grouped F16 GEMM on the warpgroup MMA (STEPSERVE_GEMM_F16_WGMMA=1,
# gemm_grouped_wgmma_cuda.cu; written without a device): its MoE GEMV and matmul layout tests
# (the prefill chunks' IQ4_XS experts and the dense 33-64-row decode matmuls take it), prefill and
# 64-stream A/B against the mma.sync kernel, alternating; then session28-second.sh's items (the
# dense grouped cases at 17 / 20 rows, MIN_ROWS=9, WIDE_MIN_K=2048, the one-row CTA cap).
#   (timeout 520 bash bench/gpu/calls/session29-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model moe_gemv_cuda_test matmul_backend_cuda_test || exit 1
wg=STEPSERVE_GEMM_F16_WGMMA=1
call_test moe_gemv_cuda_test moe_wg "GTEST_FILTER=MoeGemvCudaTest*" "$wg"
grep -E "moe_gemv iq4_xs/iq4_xs tokens=(97|200)" "$CALL_LOGS/moe_wg.log" | head -4
call_test matmul_backend_cuda_test mm_wg "GTEST_FILTER=MatmulCudaLayoutTest.*" "$wg"
for round in 1 2; do
  call_ab "" 2048,4096
  call_ab "" 2048,4096 "$wg"
done
call_ab 33,64 ""
call_ab 33,64 "" "$wg"
call_test matmul_backend_cuda_test mm "GTEST_FILTER=MatmulCudaLayoutTest.*"
mr=STEPSERVE_DENSE_GROUPED_MIN_ROWS=9
call_test matmul_backend_cuda_test mm9 "GTEST_FILTER=*_T16:*_T17:*_T32:MatmulCudaLayoutTest.Dense*" "$mr"
call_ab 8,16,24 ""
call_ab 8,16,24 "" "$mr"
call_ab 64 2048,4096
call_ab 64 2048,4096 STEPSERVE_GEMM_F16_WIDE_MIN_K=2048
for ctas in 2112 1056 4224 0; do call_ab 1,2 "" STEPSERVE_GEMV_ROW_CTAS=$ctas; done
call_done
