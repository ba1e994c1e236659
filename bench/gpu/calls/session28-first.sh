#!/usr/bin/env bash
# Session 28's first call: the dense grouped F16 GEMM for 33-64 decode rows - `1` matrices of
# >= 8192 outputs as one slot, `2` also narrower ones split over K (the o projection) - its matmul
# test, whole-model test and the 33 / 64-stream A/B (0 / 1 / 2 alternating); 3-4 streams through
# the fused MoE decode kernels (STEPSERVE_MOE_DECODE_FUSED=4) against the default; on an H200 the
# figures with the wide chunks (45 layers); then the wide chunks' prefill A/B (off, default, all 8
# sub-blocks unrolled) and the 4-layer prefill per-kernel table.
#   (timeout 560 bash bench/gpu/calls/session28-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test matmul_backend_cuda_test || exit 1
echo "(what this call reaches comes back: the steps are in order of need)"
call_test matmul_backend_cuda_test mm "GTEST_FILTER=MatmulCudaLayoutTest.*:*_T33:*_T64" \
  STEPSERVE_DENSE_GROUPED_F16=2
# Two alternating rounds on an H100 (24 layers); one on an H200, where a 45-layer 64-stream process
# takes ~30 s and the figures follow.
rounds=2
[[ -z ${CALL_LAYERS:-} ]] && rounds=1
for ((round = 1; round <= rounds; ++round)); do
  call_ab 33,64 ""
  call_ab 33,64 "" STEPSERVE_DENSE_GROUPED_F16=1
  call_ab 33,64 "" STEPSERVE_DENSE_GROUPED_F16=2
done
model_file=$(call_model_file)
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model_file" \
  STEPSERVE_DENSE_GROUPED_F16=2
# 3-4 streams through the two fused MoE decode kernels (measured slower in session 11, before the
# lean down kernel, release arrivals and the early weight loads) against the grouped GEMVs.
for round in 1 2; do
  call_ab 3,4 ""
  call_ab 3,4 "" STEPSERVE_MOE_DECODE_FUSED=4
done
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
LAYERS=4 timeout 120 bash bench/gpu/profile-prefill-h200.sh "$CALL_BUILD" >"$CALL_LOGS/prefill.log" 2>&1
echo "prefill profile rc=$? $(tail -1 "$CALL_LOGS/prefill.log")"
python3 bench/gpu/ncu_kernel_table.py "$OUT/ncu-prefill.txt" 30
call_done
