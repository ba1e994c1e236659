#!/usr/bin/env bash
# Session 26, second call: the IQ4_XS -> F16 dequantization kernel (one thread per sub-block,
# STEPSERVE_DEQUANT_IQ4XS_FAST, on by default) and the head gate in the prefill attention epilogue
# (STEPSERVE_PREFILL_ATTN_GATE, on by default): their GPU tests and the tests through them
# (matmul backend: the cuBLAS path's tiles; whole model), then alternating A/B of prefill and of
# 32 / 64 streams (whose attention projections take the dequantized tiles and cuBLAS).
#   (timeout 560 bash bench/gpu/calls/session26-second.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model dequant_cuda_test prefill_attention_cuda_test matmul_backend_cuda_test \
  model_cuda_test || exit 1
call_test dequant_cuda_test dq1
call_test dequant_cuda_test dq0 STEPSERVE_DEQUANT_IQ4XS_FAST=0
call_test prefill_attention_cuda_test pa
call_test matmul_backend_cuda_test mb
call_test model_cuda_test model
for round in 1 2; do
  call_ab "" 2048,4096
  call_ab "" 2048,4096 STEPSERVE_DEQUANT_IQ4XS_FAST=0
  call_ab "" 2048,4096 STEPSERVE_PREFILL_ATTN_GATE=0
done
for round in 1 2; do
  call_ab 32,64 ""
  call_ab 32,64 "" STEPSERVE_DEQUANT_IQ4XS_FAST=0
done
call_done
