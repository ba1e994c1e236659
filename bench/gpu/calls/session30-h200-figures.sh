#!/usr/bin/env bash
# Session 30, the last H200 try (little device time left): only the figures at 45 layers with
# this session's defaults (none measured on an H200 since session 26).
#   (timeout 200 bash bench/gpu/calls/session30-h200-figures.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model || exit 1
call_ab 1,4,16,64 2048,4096
CALL_RECIPE=q4_k_m call_ab 1 2048
call_done
