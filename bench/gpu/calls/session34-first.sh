#!/usr/bin/env bash
# Session 34's first call (written at the end of session 33, whose last device minutes could not
# start a machine): on an H200 the target figures (45 layers; none since session 26), then
# STEPSERVE_ATTN_COMPACT_HEADS=1 (written in session 33, host-emulated, never run): one A/B round
# and its timeline, its tests and the whole model, a second round; then where the batch-1 decode
# attention spends its ~11.6 us (H100 timeline): ncu's per-instruction warp samples of one launch
# (bench/gpu/ncu_source_top.py prints the hottest SASS lines) with the 16-head and the 4-head form.
#   (timeout 560 bash bench/gpu/calls/session34-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test attention_cuda_test step_graph_cuda_test stepserve || exit 1
[[ ${CALL_LAYERS:-45} == 45 ]] && call_ab 1,4,16,64 2048,4096
ch=STEPSERVE_ATTN_COMPACT_HEADS
call_ab 1,2,4,8,16 ""
call_ab 1,2,4,8,16 "" $ch=1
call_timeline compact 1 $ch=1
call_test attention_cuda_test attention $ch=1
call_test attention_cuda_test attention4 $ch=1 STEPSERVE_ATTN_CTA_HEADS=4
call_test step_graph_cuda_test graph $ch=1
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$(call_model_file)" \
  $ch=1
call_ab 1,2,4,8,16 ""
call_ab 1,2,4,8,16 "" $ch=1
args="--batches 1 --context 256 --decode-steps 2 --repeats 1"
call_ncu_source attention16 'PagedAttentionKernel' "$args"
call_ncu_source attention4 'PagedAttentionKernel' "$args" $ch=1
CALL_RECIPE=q4_k_m call_ab 1 ""
call_done
