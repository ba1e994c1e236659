#!/usr/bin/env bash
# Session 25, on an H200 if one comes (45 layers need ~108 GB): the figures the issue's targets are
# set in, last taken in session 20 (results-h200-v18.txt) - IQ4_XS 1-64 streams and prefill
# 2048 / 4096, Q4_K_M 1 / 2 / 4 streams and prefill 2048 - with sessions 21-25's defaults.
#   (timeout 300 bash bench/gpu/calls/session25-h200.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model || exit 1
call_ab 1,2,4 2048,4096
call_ab 16,64 ""
CALL_RECIPE=q4_k_m call_ab 1 2048
call_ab 8,32 ""
CALL_RECIPE=q4_k_m call_ab 2,4 ""
call_done
