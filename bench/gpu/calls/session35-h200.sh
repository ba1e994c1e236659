#!/usr/bin/env bash
# (Ran in session 35; STEPSERVE_L2_AHEAD and ROPE_IN_ATTENTION=2 were removed after it: docs say why.)
# Session 35's first call, for an H200 (needs_h200): the target figures at 45 layers (none since
# session 26) and Q4_K_M batch 1 and prefill; then two alternating A/B rounds of
# STEPSERVE_L2_AHEAD=1 / 2 (the rope kernel pulls the output projection / also the FFN's router
# and shared expert into L2) and of the third form of the rope in the attention
# (STEPSERVE_ROPE_IN_ATTENTION=1; level 2: batch 1 only), with their tests and the whole model
# under both. On an H100 it runs 24 layers (compare with H100 runs only).
#   (timeout 570 bash bench/gpu/calls/session35-h200.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test attention_rope_cuda_test rope_append_cuda_test stepserve ||
  exit 1
call_ab 1,4,16,64 2048,4096
CALL_RECIPE=q4_k_m call_ab 1 2048
oa=STEPSERVE_L2_AHEAD
ri=STEPSERVE_ROPE_IN_ATTENTION
call_test rope_append_cuda_test rope-append
call_test attention_rope_cuda_test rope-attention
call_ab 1,2,4,8,16 ""
call_ab 1,2,4,8,16 "" $oa=1
call_ab 1,2,4,8,16 "" $oa=2
call_ab 1,2,4,8,16 "" $ri=1
call_ab 1,2 "" $ri=2  # batch 1 only (level 2: removed after this call)
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model-ahead-rope \
  STEPSERVE_GPU_TEST_MODELS="$(call_model_file)" $ri=2 $oa=2
call_ab 1,2,4,8,16 "" $oa=2
call_ab 1,2,4,8,16 "" $oa=1
call_ab 1,2,4,8,16 ""
call_ab 1,2,4,8,16 "" $ri=1
call_done
