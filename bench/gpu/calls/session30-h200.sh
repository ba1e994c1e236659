#!/usr/bin/env bash
# Session 30, the H200 call: the figures the issue's targets are set in (45 layers; none since
# session 26) with this session's default (the whole-row ring of the grouped GEMV's short rows),
# bench_gemv --quick (the GEMV-alone target), the whole-model test and the MoE GEMV's IQ4_XS down
# cases, then the short-row A/B (the former kernel, =1) at 16 / 64 streams. On an H100 (24
# layers) the same without the figures' meaning.
#   (timeout 380 bash bench/gpu/calls/session30-h200.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model bench_gemv model_cuda_test moe_gemv_cuda_test stepserve || exit 1
call_ab 1,4,16,64 2048,4096
CALL_RECIPE=q4_k_m call_ab 1 2048
call_ab 2,8,32 ""
timeout 90 "$CALL_BUILD/bench/gpu/bench_gemv" --quick >"$CALL_LOGS/gemv.jsonl" 2>&1
echo "bench_gemv --quick rc=$?"; grep -v '"bench":"device"' "$CALL_LOGS/gemv.jsonl" | cut -c1-260
f=MoeGemvCudaTest.MatchesReference
call_test moe_gemv_cuda_test moe "GTEST_FILTER=*$f/18:*$f/29:*$f/2"
model_file=$(call_model_file)
CALL_TEST_TIMEOUT=150 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$model_file"
call_ab 16,64 "" STEPSERVE_GROUPED_SHORT_DEPTH=1
call_ab 16,64 ""
call_done
