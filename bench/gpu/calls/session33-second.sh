#!/usr/bin/env bash
# Session 33's second call: the split-K combine inside the decode attention kernel with the head
# gate and its int8 rows (STEPSERVE_ATTN_FUSED_COMBINE=1 now fuses the gated combine too; the
# first call's kernel timeline gave the combine kernel ~6 us of the batch-1 critical path per
# layer on the H100). Its tests both ways and with the whole model, its A/B in two alternating
# rounds, two split / CTA-head variations, and the kernel timeline with it. Also
# STEPSERVE_SMEM_CARVEOUT=100 (every kernel asks for the same L1 / shared split: does the decode
# attention's ~12 us come from SMs reconfiguring?) in the rounds and in a timeline. On an H200 the
# target figures (45 layers) first.
#   (timeout 560 bash bench/gpu/calls/session33-second.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test attention_cuda_test \
  step_graph_cuda_test stepserve || exit 1
[[ ${CALL_LAYERS:-45} == 45 ]] && call_ab 1,4,16,64 2048,4096
fc=STEPSERVE_ATTN_FUSED_COMBINE
for level in 0 1; do
  call_test attention_cuda_test attention$level $fc=$level
  call_test step_graph_cuda_test graph$level $fc=$level
done
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$(call_model_file)" \
  $fc=1
for _ in 1 2; do  # two alternating rounds
  call_ab 1,2,4,8,16 ""
  call_ab 1,2,4,8,16 "" $fc=1
  call_ab 1,2,4,8,16 "" STEPSERVE_SMEM_CARVEOUT=100
done
call_ab 1,4 "" $fc=1 STEPSERVE_SMEM_CARVEOUT=100
call_ab 1,4 "" $fc=1 STEPSERVE_ATTN_CTAS_PER_SM=4
call_ab 1,4 "" $fc=1 STEPSERVE_ATTN_CTA_HEADS=8
call_timeline fused 1 $fc=1
call_timeline carveout 1 STEPSERVE_SMEM_CARVEOUT=100
call_done
