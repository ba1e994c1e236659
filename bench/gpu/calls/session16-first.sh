#!/usr/bin/env bash
# Session 16's first device call (docs/cuda-engine.md, "Next, in order (session 16)"): the
# one-pass 64-row wide tensor-core GEMV (GemvMmaIq4XsWideKernel<8>, STEPSERVE_GEMV_MMA_WIDE=2;
# written in session 15 after its last call, checked by host emulation only): gemv_cuda_test (its
# WideIq4Xs cases run 33-64 rows through it), matmul_backend_cuda_test and model_cuda_test with
# the variable, then 40 / 48 / 64 streams against the default (F16 tiles + cuBLAS past 32 rows);
# then the determinism test 20 times over (session 15's flake) and the default figures.
#   (timeout 560 bash bench/gpu/calls/session16-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build gemv_cuda_test matmul_backend_cuda_test model_cuda_test stepserve bench_model || exit 1
model=$(call_model_file)
call_test gemv_cuda_test gemv
call_test matmul_backend_cuda_test matmul_wide2 STEPSERVE_GEMV_MMA_WIDE=2
call_ab 40,48,64 ""
call_ab 40,48,64 "" STEPSERVE_GEMV_MMA_WIDE=2
call_ab 40,48,64 ""
call_ab 40,48,64 "" STEPSERVE_GEMV_MMA_WIDE=2
call_test model_cuda_test model_wide2 STEPSERVE_GPU_TEST_MODELS="$model" STEPSERVE_GEMV_MMA_WIDE=2
# Session 15's one-off TinyModelMatchesCpu failure: a rare race (e.g. a kernel reading its input
# before its programmatic-dependent-launch wait) would show as a run-to-run difference in more
# repeats than call 6's three, and disappear with STEPSERVE_PDL=0.
call_test model_cuda_test determinism GTEST_FILTER='*Deterministic*:*TinyModelMatchesCpu*' \
  GTEST_REPEAT=20
call_ab 1,2,4,8,16,32 ""
call_ab "" 2048,4096
call_done
