#!/usr/bin/env bash
# Session 34's second call: the compact decode attention is now the default at level 1 (the 4-head
# form where a CTA holds 4 heads or fewer: the first call measured it faster and its tests passed);
# level 2 adds an 8-head form for the sliding-window layers' 6-head CTAs. Tests at level 2 (CTAs
# of 8 heads, and the model), then two alternating A/B rounds of level 0 / 1 / 2 and of level 1
# with every CTA holding 4 heads (192 CTAs for the 12-head groups: past one wave, which lost with
# the 16-head form in session 17), 32 / 64 streams once, and the timeline at level 2.
#   (timeout 560 bash bench/gpu/calls/session34-second.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test attention_cuda_test step_graph_cuda_test stepserve || exit 1
[[ ${CALL_LAYERS:-45} == 45 ]] && call_ab 1,4,16,64 2048,4096
ch=STEPSERVE_ATTN_COMPACT_HEADS
call_test attention_cuda_test attention2 $ch=2
call_test attention_cuda_test attention2-8 $ch=2 STEPSERVE_ATTN_CTA_HEADS=8
call_test step_graph_cuda_test graph2 $ch=2
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model2 STEPSERVE_GPU_TEST_MODELS="$(call_model_file)" \
  $ch=2
for _ in 1 2; do  # two alternating rounds
  call_ab 1,2,4,8,16 "" $ch=0
  call_ab 1,2,4,8,16 ""
  call_ab 1,2,4,8,16 "" $ch=2
  call_ab 1,2,4,8,16 "" STEPSERVE_ATTN_CTA_HEADS=4
done
call_timeline compact2 1 $ch=2
call_ab 32,64 ""
call_ab 32,64 "" $ch=2
call_done
