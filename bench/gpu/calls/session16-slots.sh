#!/usr/bin/env bash
# Session 16, call 6: the grouped GEMV's CTAs per slot past the new floor of 96 (call 5: 96 beat
# 48 by 3% at 64 streams): the default against 128, 192 and 48, then the default again.
#   (timeout 560 bash bench/gpu/calls/session16-slots.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build stepserve bench_model || exit 1
call_ab 16,32,64 ""
call_ab 16,32,64 "" STEPSERVE_GROUPED_ROW_CTAS=128
call_ab 16,32,64 "" STEPSERVE_GROUPED_ROW_CTAS=192
call_ab 16,32,64 "" STEPSERVE_GROUPED_ROW_CTAS=48
call_ab 16,32,64 ""
call_done
