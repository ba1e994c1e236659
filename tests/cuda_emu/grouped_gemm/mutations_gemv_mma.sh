#!/usr/bin/env bash
# Injected bugs in the chunked tensor-core GEMV (GemvMmaIq4XsChunkedKernel, gemv_mma_cuda.cu),
# each run through mutate.sh against test_gemv_mma.cc: every line should report FAIL cases.
here=$(cd "$(dirname "$0")" && pwd)
f=matmul/gemv_mma_cuda.cu
m() { bash "$here/mutate.sh" "$@"; }
m chunk_offset_x $f 'x_row[j] = c0 + (8 * j + g' 'x_row[j] = (8 * j + g'
m chunk_offset_d0 $f 'd_row0[j] = c0 + (8 * j + 2 * t <' 'd_row0[j] = (8 * j + 2 * t <'
m chunk_store_row $f 'p.y[(c0 + r) * p.y_stride + o]' 'p.y[r * p.y_stride + o]'
m chunk_rows_clamp $f 'const int rows = p.rows - c0 < 8 * NT ? p.rows - c0 : 8 * NT;' 'const int rows = 8 * NT;'
m no_reissue $f 'if (c0 > 0) k_loop.IssueFirst();' ''
m no_chunk_barrier $f '    __syncthreads();  // the partial sums are read before the next chunk writes them
  }
}

// Grouped mode' '  }
}

// Grouped mode'
m chunk_step $f 'for (int c0 = 0; c0 < p.rows; c0 += 8 * NT) {
    if (c0 > 0)' 'for (int c0 = 0; c0 < p.rows; c0 += 8 * NT + 8) {
    if (c0 > 0)'
