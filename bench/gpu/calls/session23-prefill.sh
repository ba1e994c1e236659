#!/usr/bin/env bash
# Where a 2048-token prefill's time goes: the per-kernel ncu table of a 4-layer file (prefill is the
# figure nearest its target, 7.5k vs 9k tok/s on the H200). Split out of session22-second.sh.
#   (timeout 560 bash bench/gpu/calls/session23-prefill.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model || exit 1
LAYERS=4 timeout 200 bash bench/gpu/profile-prefill-h200.sh build-h200 >"$CALL_LOGS/prefill.log" 2>&1
echo "prefill profile rc=$?"
grep -E "tokens_per_s" "${OUT:-out-h200}/prefill-wall.jsonl" | head -3
python3 bench/gpu/ncu_kernel_table.py "${OUT:-out-h200}/ncu-prefill.txt" 30
call_done
