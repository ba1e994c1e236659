#!/usr/bin/env bash
# Session 25, third call: why the prefill's MoE grouped F16 GEMM runs where it does. Call 2's table
# (4 layers, 2048 tokens, H100): GemmF16GroupedKernel 1350 us per gate / up launch and 1290 us for
# down - 4.0 ms of the ~6.1 ms a layer averages in the 24-layer prefill; 171.8 GFLOP per launch is
# ~127 TFLOPS, about 7.5 SM clocks (at an assumed 1.755 GHz)
# per m16n8k16 MMA, while its loop issues ~5.4 instructions per MMA (~1.4 clocks at 4 issues per
# clock). So stalls, not issue: ncu's sections (pipe use, shared-memory wavefronts, warp states,
# source counters) of one gate launch. Then a decode per-kernel table at 64 streams with a
# 16-token context (call 2's, at 256, was mostly the context fill).
#   (timeout 560 bash bench/gpu/calls/session25-stalls.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build bench_model || exit 1
bench=$CALL_BUILD/bench/gpu/bench_model
args=(--synthetic step-3.5-flash --layers 4 --recipe iq4_xs --batches "" --prefill 2048
  --layer-times=false --repeats 1)
rep=$OUT/gemm
timeout 200 ncu --kernel-name regex:GemmF16Grouped --launch-count 1 --section SpeedOfLight \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats \
  --section WarpStateStats --section Occupancy --section LaunchStats --section SourceCounters \
  -f -o "$rep" "$bench" "${args[@]}" >"$CALL_LOGS/ncu-gemm.log" 2>&1
echo "ncu gemm rc=$?"
timeout 60 ncu -i "$rep.ncu-rep" --page details >"$OUT/ncu-gemm.txt" 2>&1
grep -E "^  [A-Za-z].*\(|Duration|Throughput|Pipe|Issue|Occupancy|Registers|Shared Memory|Bank|Stall|Warp Cycles|Eligible|Active Warps|No Eligible|Executed Ipc|L1|L2" \
  "$OUT/ncu-gemm.txt" | head -70
timeout 60 ncu -i "$rep.ncu-rep" --page source --csv --print-source sass >"$OUT/src-gemm.csv" 2>&1
python3 bench/gpu/ncu_source_top.py "$OUT/src-gemm.csv" 40
rm -f "$rep.ncu-rep"
timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum \
  --print-summary per-kernel "$bench" --synthetic step-3.5-flash --layers 4 --recipe iq4_xs \
  --batches 64 --decode-steps 4 --repeats 1 --context 16 --prefill "" --layer-times=false \
  >"$OUT/ncu-b64.txt" 2>&1
echo "ncu b64 rc=$?"
python3 bench/gpu/ncu_kernel_table.py "$OUT/ncu-b64.txt" 30
call_done
