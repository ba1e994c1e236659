#!/usr/bin/env bash
# Session 27's last call, trimmed to the device time left after failed starts: the matmul test and
# the 33 / 64-stream A/B of the dense one-slot grouped F16 GEMM (STEPSERVE_DENSE_GROUPED_F16=1),
# the whole-model test with it, then (H200) the figures, then the wide chunks' prefill A/B (off,
# default, all 8 sub-blocks unrolled).
#   (timeout 280 bash bench/gpu/calls/session27-lean.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test matmul_backend_cuda_test || exit 1
echo "(what this call reaches comes back: the steps are in order of need)"
dg=STEPSERVE_DENSE_GROUPED_F16=1
call_test matmul_backend_cuda_test mm "GTEST_FILTER=MatmulCudaLayoutTest.*:*_T33:*_T64" "$dg"
for round in 1 2; do
  call_ab 33,64 ""
  call_ab 33,64 "" "$dg"
done
model_file=$(call_model_file)
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model_file" "$dg"
if [[ -z ${CALL_LAYERS:-} ]]; then  # the figures on an H200 only (45 layers)
  call_ab 1,4 2048,4096
  call_ab 16,64 ""
  CALL_RECIPE=q4_k_m call_ab 1 2048
fi
for round in 1 2; do
  call_ab "" 2048,4096 STEPSERVE_GEMM_F16_WIDE=0
  call_ab "" 2048,4096
  call_ab "" 2048,4096 STEPSERVE_GEMM_F16_WIDE_UNROLL8=1
done
call_done
