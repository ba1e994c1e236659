#!/usr/bin/env bash
# Session 25, last call: the KV cache as F16 against the default F32 (bench_model --kv-dtype).
# Why: the prefill attention kernel (PrefillAttentionKernel<128, float>, ~0.5 ms of a layer's
# ~6.1 ms at 2048 tokens) loads every F32 key / value tile and converts it to F16 once per query
# head - 8 (full) or 12 (SWA) times per KV head - about 64 KB per 512 MMAs; F16 pages go by
# cp.async at half the bytes. Decode attention reads half the bytes too. llama.cpp's default cache
# type is F16; the tiny model's logits move by < 4e-4 with it (docs/serve-flags.md). IQ4_XS 1 / 16
# / 64 streams and prefill 2048 / 4096 (two alternating rounds), then 16 / 64 streams at a
# 4096-token context; on an H200 (45 layers) the figures as well.
#   (timeout 290 bash bench/gpu/calls/session25-kv.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model || exit 1
for round in 1 2; do
  call_ab 1,16,64 2048,4096
  CALL_BENCH_ARGS="--kv-dtype f16" call_ab 1,16,64 2048,4096
done
CALL_BENCH_ARGS="--context 4096" call_ab 16,64 ""
CALL_BENCH_ARGS="--context 4096 --kv-dtype f16" call_ab 16,64 ""
if [[ -z ${CALL_LAYERS:-} ]]; then
  call_ab 2,4,8,32 ""
  CALL_RECIPE=q4_k_m call_ab 1,2,4 2048
fi
call_done
