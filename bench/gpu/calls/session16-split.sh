#!/usr/bin/env bash
# Session 16, call 2: the split IQ4_XS lookup for one activation row (PieceIQ4_XSOneRow,
# gemv_q8x_pieces.cuh; compile-time STEPSERVE_IQ4_SPLIT_LOOKUP) - two 8-entry sign-mode prmt
# lookups summed by a second dp4a instead of the 16-entry select: 7 instead of 11 instructions per 8
# weights (PTX of the one-row GEMV 629 -> 547, the one-token gate/up kernel 832 -> 750). Results
# bit-identical by construction. Tree A = the default (0), tree B = 1: B's GPU tests (gemv,
# moe_gemv, the model against the CPU, determinism), then alternating A / B decode at 1-16 streams.
#   (timeout 560 bash bench/gpu/calls/session16-split.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
# (Run at be58633. The switch was removed once B won: PieceIQ4_XSOneRow is the one-row piece now.)
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
targets="gemv_cuda_test moe_gemv_cuda_test model_cuda_test stepserve bench_model"
CALL_BUILD=build-split CALL_CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-DSTEPSERVE_IQ4_SPLIT_LOOKUP=1" \
  call_build $targets || exit 1
call_build bench_model stepserve || exit 1
model=$(call_model_file)
CALL_BUILD=build-split call_test gemv_cuda_test gemv_split
CALL_BUILD=build-split call_test moe_gemv_cuda_test moe_split
CALL_BUILD=build-split call_test model_cuda_test model_split STEPSERVE_GPU_TEST_MODELS="$model"
CALL_BUILD=build-split call_test model_cuda_test determinism_split \
  GTEST_FILTER='*Deterministic*:*TinyModelMatchesCpu*' GTEST_REPEAT=5
for i in 1 2; do
  echo "A (lookup16)"; call_ab 1,2,4,8,16 ""
  echo "B (split)"; CALL_BUILD=build-split call_ab 1,2,4,8,16 ""
done
call_done
