#!/usr/bin/env bash
# Session 38, first call (H200 wanted: the 45-layer target figures; on an H100 24 layers), in
# priority order (a timeout cuts the tail): the tensor-core decode attention
# (STEPSERVE_ATTN_MMA_DECODE=1, off: its kernel test, then alternating A/B rounds at 1 / 4 / 16 /
# 64 streams, with the F32 cache and with F16; the whole-model test with it); then session 37's
# unrun second call: the LM head
# at 2-8 rows through the dense grouped F16 GEMM (STEPSERVE_DENSE_GROUPED_HEAD=1, off: its matmul
# case, A/B at 2 / 4 / 8 streams), attn_v's dense grouped GEMM on the side stream
# (STEPSERVE_SIDE_DENSE_MATMULS=1, off: the concurrent-matmul test, A/B at 12 / 16); the MoE
# test on the new defaults; the figures.
#   (timeout 470 bash bench/gpu/calls/session38-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model attention_cuda_test matmul_backend_cuda_test concurrent_matmul_cuda_test \
  model_cuda_test moe_cuda_test stepserve || exit 1
mma=STEPSERVE_ATTN_MMA_DECODE
head=STEPSERVE_DENSE_GROUPED_HEAD
side=STEPSERVE_SIDE_DENSE_MATMULS
call_test attention_cuda_test attention-mma GTEST_FILTER='AttentionMmaCudaTest.*'
for round in 1 2; do
  call_ab 1,4,16,64 "" $mma=1 STEPSERVE_ROUND=$round
  call_ab 1,4,16,64 "" STEPSERVE_ROUND=$round
done
for round in 1 2; do
  CALL_BENCH_ARGS="--kv-dtype f16" call_ab 16,64 "" $mma=1 STEPSERVE_ROUND=$round
  CALL_BENCH_ARGS="--kv-dtype f16" call_ab 16,64 "" STEPSERVE_ROUND=$round
done
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model-mma \
  STEPSERVE_GPU_TEST_MODELS="$(call_model_file)" $mma=1
# Fewer, longer splits for the MMA form (its chunks pipeline their loads): 4 CTAs a multiprocessor.
call_ab 16,64 "" $mma=1 STEPSERVE_ATTN_CTAS_PER_SM=4
call_test matmul_backend_cuda_test matmul-head GTEST_FILTER='MatmulCudaLayoutTest.*' $head=1
call_test concurrent_matmul_cuda_test concurrent-side $side=1
for round in 1 2; do
  call_ab 2,4,8 "" $head=1 STEPSERVE_ROUND=$round
  call_ab 2,4,8,12,16 "" STEPSERVE_ROUND=$round
  call_ab 12,16 "" $side=1 STEPSERVE_ROUND=$round
done
call_test moe_cuda_test moe
call_ab 1,4,16,64 2048,4096
call_ncu attn16mma DecodeAttentionMma 2 "--batches 16 --decode-steps 1 --repeats 1" $mma=1
call_done
