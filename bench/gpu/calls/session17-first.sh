#!/usr/bin/env bash
# Session 17's first device call (docs/cuda-engine.md, "Next, in order (session 17)"):
# (0) the GPU tests of session 16's changes made after its last device call - the wide
# tensor-core GEMV limited to 32 rows (gemv_cuda_test 195 cases, matmul_backend_cuda_test) and
# PlaceWeight copying on the backend's stream (model_cuda_test loads real files through it);
# (1) the rare tiny-model mismatch: the two tiny cases that failed once each, repeated with PDL
# and without it (STEPSERVE_PDL=0) - a device-side ordering race would disappear without PDL;
# (2) ncu of the decode attention and its combine at batch 1 and 256 keys (stall reasons);
# (3) the v15 figures again and the Q4_K_M mix's.
#   (timeout 560 bash bench/gpu/calls/session17-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build gemv_cuda_test matmul_backend_cuda_test model_cuda_test stepserve bench_model || exit 1
model=$(call_model_file)
call_test gemv_cuda_test gemv
call_test matmul_backend_cuda_test matmul_backend
call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model"
tiny='*TinyModelMatchesCpu*:*TinyModelWithF16KvCacheMatchesCpu*'
call_test model_cuda_test tiny_pdl GTEST_FILTER="$tiny" GTEST_REPEAT=12
call_test model_cuda_test tiny_nopdl GTEST_FILTER="$tiny" GTEST_REPEAT=12 STEPSERVE_PDL=0
call_ncu attention 'PagedAttentionKernel|CombineSplits' 8 "--batches 1 --decode-steps 2 --context 256"
call_ab 1,2,4,8,16,32,64 ""
call_ab "" 2048,4096
# The Q4_K_M mix, last measured in session 9 (batch 1 121.6 tok/s, below llama.cpp's ~131).
CALL_RECIPE=q4_k_m call_ab 1,4 2048
call_done
