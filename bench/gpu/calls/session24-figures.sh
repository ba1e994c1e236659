#!/usr/bin/env bash
# The v20 figures (the lean decode loops by default since session 23): the whole 45-layer
# IQ4_XS model on an H200 (24 layers on an H100, comparable only with H100 runs such as
# results-v20.txt) at 1 / 2 / 4 / 8 / 16 / 32 / 64 streams with 2048- and 4096-token prefills,
# twice, then the Q4_K_M mix at 1 / 2 / 4 streams with a 2048-token prefill, twice; the memory
# line of each run. The docs' Measured table takes the H200 figures (the second run of each, the
# first's next to it as the spread).
#   (timeout 560 bash bench/gpu/calls/session24-figures.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model || exit 1
for round in 1 2; do
  call_ab 1,2,4,8,16,32,64 2048,4096
  CALL_RECIPE=q4_k_m call_ab 1,2,4 2048
done
call_done
