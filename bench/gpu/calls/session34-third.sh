#!/usr/bin/env bash
# Session 34's third call (call 5 ran it on the second form): the rope in the attention
# (STEPSERVE_ROPE_IN_ATTENTION=1) restructured after call 2 measured it slower - each warp loads
# all its query rows (and the key / value) in one batch after the PDL wait, and the new key's slot
# offset before it; since call 5 (third form) the first chunk's K / V loads go beside the rows'
# after the wait. Its bitwise test and the whole model with it, two alternating A/B rounds against
# the defaults and its timeline. On an H200 the target figures (45 layers) first.
#   (timeout 400 bash bench/gpu/calls/session34-third.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test attention_rope_cuda_test stepserve || exit 1
[[ ${CALL_LAYERS:-45} == 45 ]] && call_ab 1,4,16,64 2048,4096
ri=STEPSERVE_ROPE_IN_ATTENTION
call_test attention_rope_cuda_test rope-attention
grep -A6 "Google Test trace" "$CALL_LOGS/rope-attention.log" | head -24
for _ in 1 2; do  # two alternating rounds
  call_ab 1,2,4,8,16 ""
  call_ab 1,2,4,8,16 "" $ri=1
done
call_timeline rope2 1 $ri=1
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model-rope \
  STEPSERVE_GPU_TEST_MODELS="$(call_model_file)" $ri=1
call_done
