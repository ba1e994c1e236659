#!/usr/bin/env bash
# Session 28's second call: the matmul test's dense grouped cases at 17 / 20 rows (added after call
# 1); on an H200 the figures with session 28's defaults (45 layers: the dense grouped F16 GEMM and
# its K-split from 33 rows, the unrolled wide IQ4_XS kernel); then the dense grouped GEMM below the
# GEMVs' row limits (STEPSERVE_DENSE_GROUPED_MIN_ROWS=9: IQ4_XS 9-32 rows instead of the tensor-core
# GEMVs, Q4_K / Q6_K 9-16 instead of the dp4a GEMV) against the default; wide chunks from K = 2048
# only (STEPSERVE_GEMM_F16_WIDE_MIN_K=2048) against the default; the one-row GEMV's CTA cap at
# batch 1 / 2.
#   (timeout 520 bash bench/gpu/calls/session28-second.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model matmul_backend_cuda_test || exit 1
call_test matmul_backend_cuda_test mm "GTEST_FILTER=MatmulCudaLayoutTest.*"
if [[ -z ${CALL_LAYERS:-} ]]; then  # the figures on an H200 only (45 layers)
  call_ab 1,4 2048,4096
  call_ab 16,64 ""
  CALL_RECIPE=q4_k_m call_ab 1 2048
fi
mr=STEPSERVE_DENSE_GROUPED_MIN_ROWS=9
call_test matmul_backend_cuda_test mm9 "GTEST_FILTER=*_T16:*_T17:*_T32:MatmulCudaLayoutTest.Dense*" "$mr"
rounds=2
[[ -z ${CALL_LAYERS:-} ]] && rounds=1
for ((round = 1; round <= rounds; ++round)); do
  call_ab 8,16,24 ""
  call_ab 8,16,24 "" "$mr"
  CALL_RECIPE=q4_k_m call_ab 8,16 ""
  CALL_RECIPE=q4_k_m call_ab 8,16 "" "$mr"
done
# Wide chunks only from K = 2048 (the MoE down projection, K 1280, back at 64 pairs and two CTAs
# per SM; the decode's K slices under 2048 too), prefill and 64 streams.
for ((round = 1; round <= rounds; ++round)); do
  call_ab 64 2048,4096
  call_ab 64 2048,4096 STEPSERVE_GEMM_F16_WIDE_MIN_K=2048
done
# Batch 1 / 2: the one-row IQ4_XS GEMV's CTA cap, last tuned in session 12 (2112 = 16 CTAs x 132
# SMs), against half, double and no cap, after every batch-1 change since.
for ((round = 1; round <= rounds; ++round)); do
  for ctas in 2112 1056 4224 0; do call_ab 1,2 "" STEPSERVE_GEMV_ROW_CTAS=$ctas; done
done
call_done
