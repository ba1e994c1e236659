#!/usr/bin/env bash
# Injected bugs in the one-row GEMVs' weights-before-the-wait paths (gemv_q8x_cuda.cu and the ring
# of gemv_q8x_rows.cuh), each run through mutate.sh against test_gemv_one_row.cc with both early
# uses on (bits 1 and 8) and 3 CTAs, so the lean IQ4_XS kernel's warps loop over rows: every line
# should report FAIL cases.
here=$(cd "$(dirname "$0")" && pwd)
f=matmul/gemv_q8x_cuda.cu
m() {
  STEPSERVE_WEIGHTS_BEFORE_WAIT=9 STEPSERVE_GEMV_ROW_CTAS=3 EMU_TEST=test_gemv_one_row \
    bash "$here/mutate.sh" "$@"
}
m early_ring_never_reloaded $f 'if (!kEarly || o != o_first) load_ring(wp);' \
  'if (!kEarly) load_ring(wp);'
m early_ring_of_row_0 $f 'if constexpr (kEarly) load_ring(p.w + o_first * p.w_row_bytes + g * P::kBytes);' \
  'if constexpr (kEarly) load_ring(p.w + g * P::kBytes);'
m early_ring_twice_first_step matmul/gemv_q8x_rows.cuh \
  'const int64_t bk = g + k * kBlocksPerStep;' 'const int64_t bk = g;'
# Session 44: the IQ4_XS sub-block scale by direct shifts (Iq4XsSubScale, gemv_block_util.cuh,
# shared by every dp4a IQ4_XS piece): the high two bits from the wrong pair, the low nibble from
# the neighbouring sub-block.
m iq4_scale_high_bits matmul/gemv_block_util.cuh '((h.x >> (12 + 2 * ib)) & 0x30u)' \
  '((h.x >> (14 + 2 * ib)) & 0x30u)'
m iq4_scale_low_nibble matmul/gemv_block_util.cuh '((h.y >> (4 * ib)) & 15u)' \
  '((h.y >> (4 * (ib ^ 1))) & 15u)'
# Session 44: the whole iterations of the one-row IQ4_XS GEMV (STEPSERVE_GEMV_ONE_ROW_WHOLE=1):
# an iteration with refills that does not refill, the last-iteration path taken with a step
# missing.
w() {
  STEPSERVE_GEMV_ONE_ROW_WHOLE=1 EMU_TEST=test_gemv_one_row bash "$here/mutate.sh" "$@"
}
w whole_no_refill $f 'OneRowIq4XsSteps<D, false, true>(p, ring' 'OneRowIq4XsSteps<D, false, false>(p, ring'
w whole_last_too_early $f 'b0 + D * kGroups >= nb) {' 'b0 + D * kGroups >= nb - kGroups) {'
