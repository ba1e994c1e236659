#!/usr/bin/env bash
# (Ran in session 35; STEPSERVE_L2_AHEAD was removed after it: docs/cuda-engine.md says why.)
# Session 35's second call: STEPSERVE_L2_AHEAD's second form - the output projection (level 1;
# level 2 also the MoE router and shared expert) pulled into L2 by line prefetches from every
# thread of the decode attention kernel instead of bulk prefetches from the rope kernel (call 1:
# batch 1 2.335 -> 2.669 / 3.584 ms). Its kernel test, two alternating A/B rounds and the whole
# model with it. On an H200 (45 layers) the target figures first.
#   (timeout 400 bash bench/gpu/calls/session35-ahead.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test attention_cuda_test stepserve || exit 1
[[ ${CALL_LAYERS:-45} == 45 ]] && call_ab 1,4,16,64 2048,4096  # an H200: the target figures first
oa=STEPSERVE_L2_AHEAD
call_test attention_cuda_test attention-ahead GTEST_FILTER='PagedAttentionCudaKernelTest.*'
for _ in 1 2; do  # two alternating rounds
  call_ab 1,2,4,8,16 ""
  call_ab 1,2,4,8,16 "" $oa=1
  call_ab 1,2,4,8,16 "" $oa=2
done
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model-ahead \
  STEPSERVE_GPU_TEST_MODELS="$(call_model_file)" $oa=2
call_done
