#!/usr/bin/env bash
# Session 33's first call, on an H200 if one comes (45 layers: the target figures, none since
# session 26; an H100 takes 24, comparable only with H100 runs): every target figure with session
# 32's defaults, then STEPSERVE_ROPE_SETUP_BEFORE_WAIT=1 and STEPSERVE_ATTN_Q_WITH_CHUNK=1 (written
# in session 32 without device time: the rope-and-append kernel's angle table, slot and first
# norm weight before the PDL wait; the decode attention's query and first chunk loaded together;
# both host-emulated) - their tests both ways, the whole-model test with both, and their A/B
# against the default in two alternating rounds (default on only if the tests pass and it is
# faster), then Q4_K_M batch 1, the grouped tensor-core GEMM at 32 / 64 streams against the
# default, and the batch-1 graph profile with both switches. Added at session 33's start (no
# device came at first): STEPSERVE_MOE_DOWN_PREFETCH=1 / 2 / 3 (the gate/up warps prefetch the
# routed experts' down matrices into L2) - moe_gemv_cuda_test with it and its A/B in the rounds;
# and bench_model --timeline (CUPTI kernel spans of one replayed step) at 1 and 64 streams.
#   (timeout 560 bash bench/gpu/calls/session33-first.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model model_cuda_test rope_append_cuda_test attention_cuda_test \
  step_graph_cuda_test moe_gemv_cuda_test stepserve || exit 1
call_ab 1,4,16,64 2048,4096
rope=STEPSERVE_ROPE_SETUP_BEFORE_WAIT qc=STEPSERVE_ATTN_Q_WITH_CHUNK
for level in 0 1; do
  call_test rope_append_cuda_test rope$level $rope=$level
  call_test attention_cuda_test attention$level $qc=$level
  call_test step_graph_cuda_test graph$level $rope=$level $qc=$level
done
call_test moe_gemv_cuda_test moe1 STEPSERVE_MOE_DOWN_PREFETCH=1
call_test moe_gemv_cuda_test moe3 STEPSERVE_MOE_DOWN_PREFETCH=3
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$(call_model_file)" \
  $rope=1 $qc=1
for _ in 1 2; do  # two alternating rounds
  call_ab 1,2,4,8,16 ""
  call_ab 1,2,4,8,16 "" $rope=1
  call_ab 1,2,4,8,16 "" $qc=1
  for level in 1 2 3; do call_ab 1,2,4 "" STEPSERVE_MOE_DOWN_PREFETCH=$level; done
done
CALL_RECIPE=q4_k_m call_ab 1 ""
# The tensor-core grouped GEMM at decode again (refuted in session 13: 64 streams 76.8 -> 83.1 ms,
# H200), since improved for prefill: if it now comes close, a down-only form (the grouped GEMV's
# short-row down launch ran at ~71% of copy speed at 64 streams, its gate / up at ~96%) is next.
call_ab 32,64 "" STEPSERVE_GROUPED_GEMM=2
call_ab 32,64 ""
call_graph_profile new 1 $rope=1 $qc=1
# The kernel timeline (CUPTI, new this session) at 1 and 64 streams with the defaults.
call_timeline default 1,64
call_done
