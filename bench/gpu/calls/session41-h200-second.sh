#!/usr/bin/env bash
# Session 41's follow-up call (written for the H200; it ran on the warm H100 after
# session41-h100.sh, at 7011ea0, 24 layers; each call unpacks a fresh tree, so it builds again): the
# issue's other figures (decode at 8 / 32 streams, GEMV alone 4096 x 12288), the decode attention's
# split rule at batch 1 / 4 (STEPSERVE_ATTN_CTAS_PER_SM 2 / 16 against the default 8), kernel
# timelines at 4, 16 and 64 streams, and the Q4_K_M mix at 2 / 4 streams.
#   (timeout 500 bash bench/gpu/calls/session41-h200-second.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model bench_gemv || exit 1
export CALL_BENCH_ARGS="--kv-dtype f16"
call_ab 8,32 "" STEPSERVE_ROUND=1
timeout 90 "$CALL_BUILD/bench/gpu/bench_gemv" --quick >"$CALL_LOGS/gemv.jsonl" 2>&1
echo "bench_gemv --quick rc=$?"
grep -v '"bench":"device"' "$CALL_LOGS/gemv.jsonl" | cut -c1-260
call_ab 1,4 "" STEPSERVE_ATTN_CTAS_PER_SM=2
call_ab 1,4 "" STEPSERVE_ATTN_CTAS_PER_SM=16
call_ab 1,4 ""
call_timeline b4 4
call_timeline b16 16
call_timeline b64 64
CALL_RECIPE=q4_k_m call_ab 2,4 ""
call_done
