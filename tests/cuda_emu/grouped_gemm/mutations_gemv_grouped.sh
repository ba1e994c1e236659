#!/usr/bin/env bash
# Injected bugs in the grouped int8-activation GEMV (gemv_q8x_grouped_cuda.cu and the warp pieces
# of gemv_q8x_rows.cuh), each run through mutate.sh against test_gemv_grouped.cc: every line
# should report FAIL cases.
here=$(cd "$(dirname "$0")" && pwd)
f=matmul/gemv_q8x_grouped_cuda.cu
m() { bash "$here/mutate.sh" "$@"; }
m exact3_as_2 $f 'GroupChunk<P, 3, NR, D, kShort>(p, w, o0, lane, c0, 3);' \
  'GroupChunk<P, 2, NR, D, kShort>(p, w, o0, lane, c0, 2);'
m group_div_off $f 'x_rows[r] = group / p.x_group_div;
    y_rows[r] = group;
  }
  DotAndStore<P, RN' 'x_rows[r] = group;
    y_rows[r] = group;
  }
  DotAndStore<P, RN'
m row_loop_once $f 'for (int64_t o0 = first; o0 < p.out; o0 += stride) rows(o0);' 'rows(first);'
m short_store_guard matmul/gemv_q8x_rows.cuh 'if (c == 0 && o0 + g < p.out) p.y[' 'if (c == 0) p.y['
