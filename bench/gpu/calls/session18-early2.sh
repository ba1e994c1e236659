#!/usr/bin/env bash
# Session 18 call 4: which part of the weights-before-wait change pays at batch 1 (call 3: all on,
# 4.62 -> 4.52 ms at batch 1, 0.5% slower at 2 and 4 streams, where only the down kernel's 2-4
# token form runs). STEPSERVE_WEIGHTS_BEFORE_WAIT bits: 1 one-row GEMV, 2 down kernel at one token.
#   (timeout 560 bash bench/gpu/calls/session18-early2.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model || exit 1
for round in 1 2 3; do
  for mask in 0 1 2 3; do call_ab 1 "" STEPSERVE_WEIGHTS_BEFORE_WAIT=$mask; done
done
call_done
