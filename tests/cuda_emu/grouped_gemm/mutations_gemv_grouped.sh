#!/usr/bin/env bash
# Injected bugs in the grouped int8-activation GEMV (gemv_q8x_grouped_cuda.cu and the warp pieces
# of gemv_q8x_rows.cuh), each run through mutate.sh against test_gemv_grouped.cc: every line
# should report FAIL cases.
here=$(cd "$(dirname "$0")" && pwd)
f=matmul/gemv_q8x_grouped_cuda.cu
# The guarded kernels' bugs with the fixed-block-count kernels off (STEPSERVE_GROUPED_WHOLE=0).
m() { STEPSERVE_GROUPED_WHOLE=0 bash "$here/mutate.sh" "$@"; }
m exact3_as_2 $f 'GroupChunk<P, 3, NR, D, kShort, kFixedBlocks>(p, w, o0, lane, c0, 3, y_row_offset);' \
  'GroupChunk<P, 2, NR, D, kShort, kFixedBlocks>(p, w, o0, lane, c0, 2, y_row_offset);'
m group_div_off $f 'x_rows[r] = group / p.x_group_div;
    y_rows[r] = group + y_row_offset;
  }
  DotAndStore<P, RN' 'x_rows[r] = group;
    y_rows[r] = group + y_row_offset;
  }
  DotAndStore<P, RN'
m row_loop_once $f 'for (int64_t o0 = first; o0 < p.out; o0 += stride) rows(o0);' 'rows(first);'
m short_store_guard matmul/gemv_q8x_rows.cuh 'if (c == 0 && o0 + g < p.out) p.y[' 'if (c == 0) p.y['
# AccumulateRowsPointers.
r=matmul/gemv_q8x_rows.cuh
m ptr_weights_not_advanced $r 'for (int n = 0; n < NR; ++n) wp[n] += D * kStepBytes;' ';'
m ptr_refill_one_step_short $r 'wp[n] + (ahead ? k + D : k) * kStepBytes' \
  'wp[n] + (ahead ? k + D - 1 : k) * kStepBytes'
m ptr_scales_stride $r 'dp[r] += D * kStepD;' 'dp[r] += D * kStepD / 2;'
m ptr_x_block_offset $r 'P::LoadXAt(xp[r] + k * kStepX, dp[r] + k * kStepD)' \
  'P::LoadXAt(xp[r], dp[r] + k * kStepD)'
# AccumulateShortRowsPointers (the short-row chunks; 5-block rows, two iterations of a 4-deep ring:
# the weight pointer's advance is never used for a load there, the activations' is).
m ptr_short_x_not_advanced $r 'xp[r] += D * P::kElems;' ';'
m ptr_short_scales_stride $r 'dp[r] += D * (P::kElems / 32);' 'dp[r] += D;'
m ptr_short_refill_offset $r 'ring[k] = P::LoadRaw(wp + (k + D) * P::kBytes, c);' \
  'ring[k] = P::LoadRaw(wp + (k + D - 1) * P::kBytes, c);'
# The gate / up pair (GemvParams::w2, session 40): the second half's slot, output rows, matrices
# and zero rows.
m pair_slot $f 'slot -= p.w2_first_slot;' 'slot -= 0;'
m pair_y_offset $f 'y_rows[r] = group + y_row_offset;' 'y_rows[r] = group;'
m pair_matrix $f 'matrices = p.w2;' 'matrices = p.w;'
m pair_zero_rows $f 'p.y[(p.group_order[i] + y_row_offset) * p.y_stride' \
  'p.y[(p.group_order[i]) * p.y_stride'
# Session 45: IQ4_XS rows through the kernels compiled for their block count
# (STEPSERVE_GROUPED_WHOLE=3): in the five-block short-row kernel a block left out and the kernel
# taken for shorter rows; in the 16-block long-row one the first iteration's refill skipped, the
# activations not advanced, the long kernel taken for rows of another length. (Its weight
# pointers' advance is dead with two iterations - the last has no refills - so a mutation there
# is equivalent and survives.)
w() {
  STEPSERVE_GROUPED_WHOLE=3 EMU_TEST=test_gemv_grouped bash "$here/mutate.sh" "$@"
}
w whole_block_dropped $r '// block b0
  const int nb = kFixedBlocks > 0 ? kFixedBlocks :' '// block b0
  const int nb = kFixedBlocks > 0 ? kFixedBlocks - 1 :'
w whole_shorter_rows $f 'p.in == kShortWholeRowDepth * P::kElems) {' \
  'p.in <= kShortWholeRowDepth * P::kElems) {'
w whole_long_no_refill $r 'if (it + 1 < kIters) ring[k][n] =' 'if (it + 1 < kIters - 1) ring[k][n] ='
w whole_long_x_not_advanced $r 'xp[r] += kStepX * D;' ';'
w whole_long_other_rows $f 'p.in == kGroupedWholeLongBlocks * P::kElems) {' \
  'p.in >= 8 * P::kElems) {'
