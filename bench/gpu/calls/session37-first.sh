#!/usr/bin/env bash
# Session 37's first call (H200 wanted: the 45-layer target figures, none since session 26; on an
# H100 it runs 24 layers): the streamed GEMV test with its several-row case (written in session 36,
# never run); the figures; two alternating A/B rounds of STEPSERVE_GEMV_STREAM_ROWS=1 (the LM head
# at 2-8 rows through the bulk-copy streamed kernel) at 2 / 4 / 8 streams; Q4_K_M; the 4-stream
# timeline with the switch on. Steps in priority order: a timeout cuts the tail.
#   (timeout 540 bash bench/gpu/calls/session37-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model gemv_stream_cuda_test || exit 1
call_test gemv_stream_cuda_test gemv-stream
call_ab 1,4,16,64 2048,4096
rows=STEPSERVE_GEMV_STREAM_ROWS
for round in 1 2; do
  call_ab 2,4,8 "" $rows=1 STEPSERVE_ROUND=$round
  call_ab 2,4,8 "" STEPSERVE_ROUND=$round
done
CALL_RECIPE=q4_k_m call_ab 1 2048
call_timeline rows4 "4" $rows=1
call_done
