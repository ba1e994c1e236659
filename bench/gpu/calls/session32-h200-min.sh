#!/usr/bin/env bash
# Session 32's shortest H200 call (for what is left of a session's device time, ~300 s with the
# start): the target figures only - 45 layers at 1 / 4 / 16 / 64 streams, prefill 2048 / 4096 and
# the Q4_K_M mix at batch 1 - with the session's defaults (their tests ran on the H100).
#   (timeout 200 bash bench/gpu/calls/session32-h200-min.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model || exit 1
call_ab 1,4,16,64 2048,4096
CALL_RECIPE=q4_k_m call_ab 1 ""
call_done
