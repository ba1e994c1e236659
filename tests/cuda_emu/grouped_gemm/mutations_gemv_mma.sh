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
# GemvMmaIq4XsDecodeGroupedKernel (test_gemv_mma_decode: one CTA per slot, warps looping over
# tiles).
md() { EMU_TEST=test_gemv_mma_decode bash "$here/mutate.sh" "$@"; }
f=matmul/gemv_mma_decode_grouped.cuh
md decode_tile_skipped $f 'const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;' \
  'const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps + 1;'
md decode_chunk_of_7 $f 'const int cols = end - c0 < 8 ? end - c0 : 8;' \
  'const int cols = end - c0 < 8 ? end - c0 : 7;'
md decode_scale_column $f 'const int d_row1 = x_of(2 * t + 1) / p.x_group_div;' \
  'const int d_row1 = x_of(2 * t) / p.x_group_div;'
md decode_second_block_x $f 'xp + 256, d0 + 8, d1 + 8, acc);' 'xp, d0 + 8, d1 + 8, acc);'
md decode_copy_half $f 'uint8_t* dst = stage + r * kPairBytes + 16 * half;' \
  'uint8_t* dst = stage + r * kPairBytes;'
md decode_scale_odd_even $f 'ScaleOfByte((ib & 1) ? odd_a : even_a, ib >> 1, da);' \
  'ScaleOfByte((ib & 1) ? even_a : odd_a, ib >> 1, da);'
md decode_scale_bias $f '8388640.0f);' '8388639.0f);'
md decode_zero_rows_half $f 'for (int i = begin + (lane >> 4); i < end; i += 2) {' \
  'for (int i = begin + (lane >> 4); i < end; i += 4) {'
