#!/usr/bin/env bash
# Session 25, second call: where the time goes now, as ncu per-kernel tables (4-layer IQ4_XS
# synthetic Step-3.5-Flash: layers 0-2 dense FFN, layer 3 MoE) of
#  1. a 2048-token prefill (session23-prefill.sh's table, never run: prefill was last tabled in
#     session 6, results-h200-prefill-kernels-v6.txt);
#  2. decode steps at 64 streams (the figure furthest from its target: 1005 vs 2100 tok/s on the
#     H200; last tabled in session 11, results-h200-decode-kernels-v11.txt);
# after the MoE decode GPU test with the one-arrival-per-CTA gate/up kernel now the default.
#   (timeout 560 bash bench/gpu/calls/session25-profile.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model moe_gemv_cuda_test || exit 1
call_test moe_gemv_cuda_test moe_gemv_decode GTEST_FILTER='*Decode*'
LAYERS=4 timeout 200 bash bench/gpu/profile-prefill-h200.sh "$CALL_BUILD" >"$CALL_LOGS/prefill.log" 2>&1
echo "prefill profile rc=$? $(tail -1 "$CALL_LOGS/prefill.log")"
grep -h tokens_per_s "$OUT/prefill-wall.jsonl" | head -3
python3 bench/gpu/ncu_kernel_table.py "$OUT/ncu-prefill.txt" 32
WALL=0 BATCHES=64 timeout 220 bash bench/gpu/profile-decode-h200.sh "$CALL_BUILD" \
  >"$CALL_LOGS/decode.log" 2>&1
echo "decode profile rc=$? $(tail -1 "$CALL_LOGS/decode.log")"
python3 bench/gpu/ncu_kernel_table.py "$OUT/ncu-b64.txt" 32
call_done
