#!/usr/bin/env bash
# Session 30, last call: what an L2 prefetch of a matrix ahead of its one-row GEMV could buy at
# batch 1 (bench_gemv --l2: IQ4_XS / Q4_K 4096x12288 and 12288x4096 with the weights rotated
# through HBM and read from L2); on an H200 also the figures at 45 layers.
#   (timeout 200 bash bench/gpu/calls/session30-l2.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_gemv bench_model || exit 1
timeout 80 "$CALL_BUILD/bench/gpu/bench_gemv" --l2 >"$CALL_LOGS/gemv.jsonl" 2>&1
echo "bench_gemv --l2 rc=$?"
grep '"gemv"' "$CALL_LOGS/gemv.jsonl" | sed 's/"act":"q8_pre",//; s/"rows":1,//' | cut -c1-250
grep 'hbm_copy' "$CALL_LOGS/gemv.jsonl"
if [[ -z ${CALL_LAYERS:-} ]]; then  # an H200: the figures (45 layers)
  call_ab 1,4,16,64 2048,4096
fi
call_done
