#!/usr/bin/env bash
# Session 34's second call. (1) STEPSERVE_ROPE_IN_ATTENTION=1 (new, never run): the decode
# attention normalises and rotates its own q / k heads and appends K / V itself, loading the first
# chunk of older keys before its PDL wait - one kernel fewer per layer. Its bitwise test against
# the two kernels, the attention / rope / graph tests and the whole model with it, then A/B.
# (2) The compact decode attention (now the default at level 1, the first call measured it):
# level 2's 8-head form and every CTA at 4 heads, in the same rounds. On an H200 the target
# figures first.
#   (timeout 560 bash bench/gpu/calls/session34-second.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test attention_cuda_test attention_rope_cuda_test \
  rope_append_cuda_test step_graph_cuda_test stepserve || exit 1
[[ ${CALL_LAYERS:-45} == 45 ]] && call_ab 1,4,16,64 2048,4096
ri=STEPSERVE_ROPE_IN_ATTENTION ch=STEPSERVE_ATTN_COMPACT_HEADS
call_test attention_rope_cuda_test rope-attention
grep -A6 "Google Test trace" "$CALL_LOGS/rope-attention.log" | head -24
call_test attention_rope_cuda_test rope-attention2 $ch=2
call_test rope_append_cuda_test rope-append
call_test attention_cuda_test attention
call_test step_graph_cuda_test graph-rope $ri=1
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model-rope \
  STEPSERVE_GPU_TEST_MODELS="$(call_model_file)" $ri=1
for _ in 1 2; do  # two alternating rounds
  call_ab 1,2,4,8,16 ""
  call_ab 1,2,4,8,16 "" $ri=1
  call_ab 1,2,4,8,16 "" $ch=2
done
call_timeline rope 1 $ri=1
call_ab 32,64 ""
call_ab 32,64 "" $ri=1
call_ab 1,4 "" $ch=0
call_ab 1,4 "" STEPSERVE_ATTN_CTA_HEADS=4
call_ab 1,4 "" $ri=1 $ch=2
call_done
