#!/usr/bin/env bash
# Session 35's short H200 call (needs_h200): the target figures at 45 layers with this session's
# defaults - decode at 1 / 4 / 16 / 64 streams, prefill 2048 / 4096, Q4_K_M batch 1 and prefill.
#   (timeout 200 bash bench/gpu/calls/session35-targets.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model || exit 1
call_ab 1,4,16,64 2048,4096
CALL_RECIPE=q4_k_m call_ab 1 2048
call_done
