#!/usr/bin/env bash
# Session 16, call 5: the row-loop caps again now that one-row IQ4_XS blocks decode in fewer
# instructions (PieceIQ4_XSOneRow): the one-row GEMV's CTA cap (STEPSERVE_GEMV_ROW_CTAS, default
# 2112; 0 = one row per warp) at batch 1-2, and the grouped GEMV's CTAs per slot
# (STEPSERVE_GROUPED_ROW_CTAS, default max(48, 6912 / slots)) at 16-64 streams. Environment only.
#   (timeout 560 bash bench/gpu/calls/session16-tune.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build stepserve bench_model || exit 1
for i in 1 2; do
  call_ab 1,2 ""
  call_ab 1,2 "" STEPSERVE_GEMV_ROW_CTAS=0
  call_ab 1,2 "" STEPSERVE_GEMV_ROW_CTAS=4224
done
call_ab 16,32,64 ""
call_ab 16,32,64 "" STEPSERVE_GROUPED_ROW_CTAS=32
call_ab 16,32,64 "" STEPSERVE_GROUPED_ROW_CTAS=96
call_ab 16,32,64 ""
call_done
