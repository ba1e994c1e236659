#!/usr/bin/env bash
# Session 20, last minutes of device time: ncu of batch 1's expert kernels and one-row GEMVs only
# (in session20-third.sh the norms of the context fill took all 16 launches of its regex).
#   (timeout 170 bash bench/gpu/calls/session20-ncu.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model || exit 1
call_ncu b1-moe 'ExpertGateUpKernel|ExpertDownCombineKernel|GemvIq4XsOneRowKernel' 12 \
  "--batches 1 --decode-steps 2 --context 256"
call_done
