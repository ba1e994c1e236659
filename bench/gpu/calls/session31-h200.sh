#!/usr/bin/env bash
# Session 31's first call for the next machine (written in a session that had no device time):
# the figures the issue's targets are set in (45 layers on an H200; 24 on an H100, comparable only
# with H100 runs), bench_gemv --quick (the GEMV-alone target), then the new per-kernel marginal
# costs inside the replayed step (bench_model --graph-profile at 1 / 4 / 64 streams: which kernels
# a step really waits on, with the PDL overlap that ncu's one-at-a-time table hides) and the new
# ConcurrentMatmuls test, and what a dependent kernel boundary costs (bench_launch_chain).
# session31-concurrent.sh is the second call (its A/B and model tests).
#   (timeout 580 bash bench/gpu/calls/session31-h200.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model bench_gemv concurrent_matmul_cuda_test graph_kernel_profile_cuda_test \
  bench_launch_chain || exit 1
call_ab 1,4,16,64 2048,4096
CALL_RECIPE=q4_k_m call_ab 1 2048
timeout 90 "$CALL_BUILD/bench/gpu/bench_gemv" --quick >"$CALL_LOGS/gemv.jsonl" 2>&1
echo "bench_gemv --quick rc=$?"; grep -v '"bench":"device"' "$CALL_LOGS/gemv.jsonl" | cut -c1-260
call_test graph_kernel_profile_cuda_test profile
timeout 60 "$CALL_BUILD/bench/gpu/bench_launch_chain" >"$CALL_LOGS/chain.jsonl" 2>&1
echo "bench_launch_chain rc=$?"; cut -c1-230 "$CALL_LOGS/chain.jsonl"
call_graph_profile step 1,4,64
call_test concurrent_matmul_cuda_test concurrent
call_done
