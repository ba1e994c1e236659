#!/usr/bin/env bash
# One device call on the H200 host: build the GPU test + benchmark from the bundled Debian
# packages (docs/cuda-host.md), run the GPU tests, the GEMV benchmark, and ncu on the quick
# benchmark (the measured limiter). Logs go to $OUT (or ./out-h200). Usage: bash bench/gpu/run-h200.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-out-h200}
mkdir -p "$out"
build=${1:-/tmp/b}
export NCCL_HOME=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
start=$(date +%s)
bash scripts/bundle-deps.sh build "$build" gemv_cuda_test bench_gemv >"$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; exit 1; }
echo "build: $(($(date +%s) - start)) s"
source <(bash scripts/bundle-deps.sh env)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
"$build/tests/gpu/gemv_cuda_test" >"$out/test.log" 2>&1
echo "test rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/test.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$out/test.log" | head -20
grep -E 'rel_error' "$out/test.log" | sort -t= -k3 -g | tail -3
"$build/bench/gpu/bench_gemv" >"$out/bench.jsonl" 2>"$out/bench.err"
echo "bench rc=$?"
cat "$out/bench.err"
cuobjdump -sass "$build/bench/gpu/bench_gemv" >"$out/sass.txt" 2>&1 || true
gzip -f "$out/sass.txt"
if command -v ncu >/dev/null; then
  timeout 240 ncu --clock-control none -k regex:'GemvQ8Kernel|QuantizeQ8Kernel' -c 4 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
    --section LaunchStats --section SchedulerStats --section WarpStateStats \
    "$build/bench/gpu/bench_gemv" --quick >"$out/ncu.txt" 2>&1
  echo "ncu rc=$?"
fi
python3 - "$out/bench.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["bench"] == "gemv":
        print(f'{r["act"]:7s} {r["type"]:7s} {r["out"]:6d}x{r["in"]:<6d} rows {r["rows"]:2d} '
              f'{r["us"]:9.2f} us {r["gbps"]:7.1f} GB/s {100 * r["fraction_of_copy"]:5.1f}%')
    else:
        print(line.strip())
PY
