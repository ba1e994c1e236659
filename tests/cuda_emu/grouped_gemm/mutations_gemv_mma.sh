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
