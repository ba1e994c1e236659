#!/usr/bin/env bash
# Session 29's second call: the dense grouped F16 GEMM's new per-type row limits (IQ4_XS from 17,
# Q4_K / Q6_K from 9; DenseGroupedMinRows) as the default: the matmul tests (every type at 1-300
# rows, the dense grouped cases now from 9 rows) and the whole-model test on the 4-layer file, then
# the default against STEPSERVE_DENSE_GROUPED_MIN_ROWS=0 (session 28's limits) at 12-32 streams,
# IQ4_XS and Q4_K_M; on an H200 the figures at 45 layers (the targets' card).
# Then the 12-warp wgmma GEMM (STEPSERVE_GEMM_F16_WGMMA=2).
#   (timeout 520 bash bench/gpu/calls/session29-second.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test matmul_backend_cuda_test stepserve || exit 1
call_test matmul_backend_cuda_test mm "GTEST_FILTER=*MatmulCuda*"
model_file=$(call_model_file)
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model_file"
old=STEPSERVE_DENSE_GROUPED_MIN_ROWS=0
if [[ -z ${CALL_LAYERS:-} ]]; then  # an H200: the figures (45 layers)
  call_ab 1,4,16,64 2048,4096
  CALL_RECIPE=q4_k_m call_ab 1 2048
fi
call_ab 12,16,24,32 "" "$old"
call_ab 12,16,24,32 ""
CALL_RECIPE=q4_k_m call_ab 12,16,24 "" "$old"
CALL_RECIPE=q4_k_m call_ab 12,16,24 ""
# The wgmma GEMM with 12 warps (STEPSERVE_GEMM_F16_WGMMA=2: 192 rows per CTA, 3 warps per
# scheduler to hide the decode's latency): its IQ4_XS many-token MoE cases, then prefill against
# the default (mma.sync) and the 8-warp form.
f=MoeGemvCudaTest.MatchesReference
call_test moe_gemv_cuda_test moe_wg2 "GTEST_FILTER=*$f/5:*$f/6:*$f/7:*$f/12:*$f/13" \
  STEPSERVE_GEMM_F16_WGMMA=2
call_ab "" 2048,4096
call_ab "" 2048,4096 STEPSERVE_GEMM_F16_WGMMA=2
call_ab "" 2048,4096 STEPSERVE_GEMM_F16_WGMMA=1
call_done
