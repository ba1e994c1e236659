#!/usr/bin/env bash
# Injected bugs in the wide tensor-core GEMV (GemvMmaIq4XsWideKernel and its dispatch in
# LaunchGemvQ8xMma, gemv_mma_cuda.cu), each run through mutate.sh against test_gemv_mma.cc: every
# line should report FAIL cases. (Until session 15 the kernel looped over chunks of 32 rows and
# this list injected bugs into that loop; the loop is gone, one pass takes up to 32 rows - up to
# 64 until session 16.)
here=$(cd "$(dirname "$0")" && pwd)
f=matmul/gemv_mma_cuda.cu
m() { bash "$here/mutate.sh" "$@"; }
m no_store_guard $f 'if (r < rows) p.y[r * p.y_stride + o] = v;' 'p.y[r * p.y_stride + o] = v;'
m scale_row $f 'd_row1[j] = 8 * j + 2 * t + 1 < last ? 8 * j + 2 * t + 1 : last;' \
  'd_row1[j] = 8 * j + 2 * t < last ? 8 * j + 2 * t : last;'
m wide_threshold $f 'if (p.rows > kGemvMmaMaxRows) {' 'if (p.rows > kGemvMmaMaxRows + 1) {'
m clamp_off_by_one $f '    const int last = rows - 1;
    x_row[j]' '    const int last = rows - 2;
    x_row[j]'
# Session 43: the leaner IQ4_XS decode shared by the tensor-core kernels (mma_iq4_util.cuh's
# Iq4SubScales and MmaS8Scaled with its biased accumulators, gemv_q8x_pieces.cuh's Lookup16Pairs); all caught then (8 cases
# each, 7 for the staged tile's test.cc).
u=matmul/mma_iq4_util.cuh
EMU_TEST=test_gemv_mma m scale_offset $u '8388640.0f' '8388608.0f'
EMU_TEST=test_gemv_mma m scale_byte $u '0x7440u |' '0x7441u |'
EMU_TEST=test_gemv_mma m scale_parity $u '(ib & 1) ? odd : even' '(ib & 1) ? even : odd'
EMU_TEST=test_gemv_mma m epilogue_row $u 'acc[2] += IntToFloat(c[2]) * (dl_g8 * d0)' 'acc[2] += IntToFloat(c[2]) * (dl_g * d0)'
EMU_TEST=test_gemv_mma m lookup_pick1 matmul/gemv_q8x_pieces.cuh 'pick1 = pick >> 16' 'pick1 = pick >> 12'
EMU_TEST=test_gemv_mma m bias_off $u 'MmaS8(a, b0, b1, kIntToFloatBias, c);' 'MmaS8(a, b0, b1, 0, c);'
EMU_TEST="test" m staged_scale matmul/mma_iq4_staged.cuh 'dl_b = sb.Of(ib)' 'dl_b = sa.Of(ib)'
