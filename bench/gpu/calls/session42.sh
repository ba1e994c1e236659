#!/usr/bin/env bash
# Ran once, on an H100 at 874120c (bench/gpu/results-v37.txt); the tall kernel lost in every mode
# and was removed after it, so on a later head the STEPSERVE_GEMV_MMA_TALL runs are the default
# and the TallIq4Xs test filter matches nothing.
# Session 42's call (an H200 if one comes - then the 45-layer target figures first - else an
# H100 at 24 layers; compare only with runs on the same card): the tall tensor-core GEMV
# (STEPSERVE_GEMV_MMA_TALL, gemv_mma_tall_cuda.cu: 64 rows per CTA sharing staged activations, K
# split over clusters of 2-4 CTAs; new, host-emulated only): its test cases in modes 1-3, the
# GEMV alone at 8 / 12 / 16 rows (bench_gemv --rows) and the decode A/B at 8 / 12 / 16 streams in
# two alternating rounds, 2 / 4 streams with it from 2 rows against the default, then the
# whole-model test with it, the stall reasons of its 16-row launches and a 16-stream timeline.
# ~350 s on an H100; with the argument `short` (~200 s) one A/B round, the whole-model test, and
# nothing after it.
#   (timeout 570 bash bench/gpu/calls/session42.sh [short] > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
export CALL_BENCH_ARGS="--kv-dtype f16"  # what `stepserve serve` uses on a GPU (--kv-dtype auto)
call_build bench_model bench_gemv gemv_cuda_test model_cuda_test stepserve || exit 1
tall=STEPSERVE_GEMV_MMA_TALL
if [[ -z ${CALL_LAYERS:-} ]]; then  # an H200: the target figures first (none since session 26)
  call_ab 1,4,16,64 2048
  CALL_RECIPE=q4_k_m call_ab 1 ""
fi
call_test gemv_cuda_test tall1 GTEST_FILTER='TallIq4Xs/*' $tall=1
[[ ${1:-} == short ]] || call_test gemv_cuda_test tall2 GTEST_FILTER='TallIq4Xs/*' $tall=2
call_test gemv_cuda_test tall3 GTEST_FILTER='TallIq4Xs/*' $tall=3
for mode in 0 1 2 3; do
  echo "bench_gemv --rows $tall=$mode"
  env $tall=$mode "$CALL_BUILD/bench/gpu/bench_gemv" --rows 2>&1 | grep iq4_xs |
    sed -nE 's/.*("out":[0-9]+,"in":[0-9]+,"rows":[0-9]+).*("us":[0-9.]+).*("fraction_of_copy":[0-9.]+).*/\1 \2 \3/p'
done
rounds="1 2"
[[ ${1:-} == short ]] && rounds=1
for round in $rounds; do
  for mode in 0 1 2 3; do call_ab 8,12,16 "" $tall=$mode STEPSERVE_ROUND="$round"; done
done
if [[ ${1:-} == short ]]; then
  CALL_TEST_TIMEOUT=150 call_test model_cuda_test model-tall STEPSERVE_GEMV_MMA_TALL=1 \
    STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
  call_done
  exit 0
fi
# From 2 rows (STEPSERVE_GEMV_MMA=2): the 16-row kernel lost to dp4a at 2-4 streams (session 41).
call_ab 2,4 "" STEPSERVE_GEMV_MMA=2 $tall=1
call_ab 2,4 ""
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model-tall STEPSERVE_GEMV_MMA_TALL=1 \
  STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
call_ncu_stalls tall16 GemvMmaIq4XsTallKernel 4 "--batches 16 --decode-steps 2" $tall=1
call_timeline b16-tall 16 $tall=1
call_done
