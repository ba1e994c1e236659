#!/usr/bin/env bash
# Session 33's third call: STEPSERVE_ATTN_COMPACT_HEADS=1, the head_dim 128 decode attention
# compiled for at most 4 heads a CTA (its unrolled per-head loops a quarter as long) when a
# launch's CTAs hold that few - batch 1 (8 KV heads x 2 passes x 8 splits). Why: the 16-head
# kernel is ~68 KB of SASS run once per CTA at short contexts, and it took ~11.6 us of the batch-1
# step per layer (timeline, calls 1-2; carveout and in-kernel combine refuted). Ordered for a short
# device budget (what was written under $OUT comes back if the call is cut): one A/B round and the
# timeline, then its tests and the whole model with it, then a second round. On an H200 the target
# figures (45 layers) first.
#   (timeout 300 bash bench/gpu/calls/session33-third.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
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
call_done
