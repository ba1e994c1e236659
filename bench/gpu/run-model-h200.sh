#!/usr/bin/env bash
# One device call on the H200 host for the CUDA engine: build the GPU tests, the model benchmark
# and stepserve from the bundled Debian packages (docs/cuda-host.md), run every GPU test, compare
# a real-shape synthetic file on CUDA against the CPU backend, then benchmark whole-model decode
# and prefill. Logs go to $OUT (or ./out-h200).
# Usage: bash bench/gpu/run-model-h200.sh [tests|bench|all|quick|mixes|ab|gemv|rows|prefill|q4k] [BUILD_DIR]
#   quick: the GPU tests in QUICK_TESTS (default: the MoE, attention, step-graph and model tests),
#   then 45-layer decode at batch 1, 2, 4, 16, 64 and prefill 2048 / 4096, then the AB_RUNS (if
#   set) at AB_BATCHES - one device call after a change to the decode path (session 11's call 4).
#   ab: batch 1 and 64 (AB_BATCHES) decode with the defaults, with the one-row GEMV never
#   streamed (STEPSERVE_GEMV_STREAM=0; default auto), with every kernel in plain stream order
#   (STEPSERVE_PDL=0), without the tensor-core GEMV (STEPSERVE_GEMV_MMA=0), and without fused
#   projections and device top-k; AB_RUNS=';A=1;--flag' picks the runs.
#   gemv: the GEMV tests and bench_gemv --quick with the streamed one-row GEMV on and off.
#   rows: gemv_cuda_test, bench_gemv --rows with the tensor-core GEMV from 2 rows and off
#   (STEPSERVE_GEMV_MMA=2/0), decode at batch 4 and 16 with it from 2 rows, from 8 (default), off.
#   prefill: the MoE and attention GPU tests, then 45-layer prefill (2048, 4096) with the defaults,
#   with STEPSERVE_GROUPED_GEMM_F16=0 (the int8 grouped GEMM) and with PREFILL_RUNS' settings.
#   q4k: the prefill tests (as in prefill), then 45-layer prefill 2048 / 4096 of the Q4_K_M mix with
#   the defaults (the grouped F16 GEMM's Q4_K and Q6_K decoders on since session 10: every MoE
#   layer on the device) and with the Q4_K decoder only (STEPSERVE_GROUPED_GEMM_F16=2: the 19
#   layers with Q6_K expert `down` take the host-grouped cuBLAS path).
#   mixes: the Q4_K_M mix (45 layers) and the Step-5 shapes in the step5-q2 recipe (20 of 92
#   layers: the whole model does not fit one H200) instead of the IQ4_XS benchmark.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
what=${1:-all}
build=${2:-build-h200}
out=${OUT:-out-h200}
mkdir -p "$out"
export NCCL_HOME=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
tests=(gemv_cuda_test gemv_stream_cuda_test moe_gemv_cuda_test pointwise_cuda_test attention_cuda_test
       matmul_backend_cuda_test moe_cuda_test fused_quant_cuda_test step_graph_cuda_test
       logits_topk_cuda_test prefill_attention_cuda_test model_cuda_test)
start=$(date +%s)
targets=()
for t in "${tests[@]}"; do
  grep -q "NAME $t " tests/gpu/CMakeLists.txt && targets+=("$t")
done
extra=(stepserve)
[[ $what != tests ]] && extra+=(bench_model bench_row_kernels bench_gemv)
[[ $what == gemv ]] && targets=(gemv_stream_cuda_test gemv_cuda_test moe_gemv_cuda_test) extra=(bench_gemv)
[[ $what == rows ]] && targets=(gemv_cuda_test) extra=(bench_gemv bench_model)
if [[ $what == quick ]]; then
  targets=()
  for t in ${QUICK_TESTS:-moe_gemv_cuda_test moe_cuda_test attention_cuda_test step_graph_cuda_test model_cuda_test}; do
    grep -q "NAME $t " tests/gpu/CMakeLists.txt && targets+=("$t")
  done
  extra=(stepserve bench_model)
fi
if [[ $what == prefill || $what == q4k ]]; then
  targets=()
  for t in moe_gemv_cuda_test moe_cuda_test attention_cuda_test prefill_attention_cuda_test; do
    grep -q "NAME $t " tests/gpu/CMakeLists.txt && targets+=("$t")
  done
  extra=(bench_model)
fi
bash scripts/bundle-deps.sh build "$build" "${targets[@]}" "${extra[@]}" \
  -- -DCMAKE_BUILD_TYPE=Release >"$out/build.log" 2>&1 ||
  { grep -E "error|Error" "$out/build.log" | head -30; tail -20 "$out/build.log"; exit 1; }
echo "build: $(($(date +%s) - start)) s (${targets[*]})"
source <(bash scripts/bundle-deps.sh env)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw,memory.used \
  --format=csv,noheader
models=/tmp/stepserve-models
mkdir -p "$models"
if [[ $what == tests || $what == all || $what == quick ]]; then
  for t in "${targets[@]}"; do
    [[ $t == model_cuda_test ]] && continue
    timeout 300 "$build/tests/gpu/$t" >"$out/$t.log" 2>&1
    echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$out/$t.log" | tr '\n' ' ')"
    grep -E '^\[  FAILED' "$out/$t.log" | head -10
  done
  if [[ " ${targets[*]} " == *" model_cuda_test "* ]]; then
    [[ -f $models/flash4.gguf ]] ||
      "$build/server/stepserve" make-model --preset step-3.5-flash --layers 4 --recipe iq4_xs \
        --out "$models/flash4.gguf" >"$out/make-flash4.log" 2>&1
    STEPSERVE_GPU_TEST_MODELS=$models/flash4.gguf timeout 400 \
      "$build/tests/gpu/model_cuda_test" >"$out/model_cuda_test.log" 2>&1
    echo "model_cuda_test rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' \
      "$out/model_cuda_test.log" | tr '\n' ' ')"
    grep -E '^\[  FAILED|rel|mismatch' "$out/model_cuda_test.log" | head -20
  fi
fi
if [[ $what == bench || $what == all ]]; then
  # (bench_row_kernels, the one-row kernels alone, is built too; run it by hand when they change)
  timeout 60 "$build/bench/gpu/bench_gemv" --quick >"$out/bench-gemv.jsonl" 2>&1
  echo "bench_gemv --quick rc=$?"
  cat "$out/bench-gemv.jsonl"
  timeout 420 "$build/bench/gpu/bench_model" --synthetic step-3.5-flash --layers 45 \
    --recipe iq4_xs --batches 1,4,16,64 --prefill 2048,4096 >"$out/bench-iq4xs.jsonl" \
    2>"$out/bench-iq4xs.err"
  echo "bench iq4_xs rc=$?"
  cat "$out/bench-iq4xs.jsonl" | grep -v '"layer"'
  tail -5 "$out/bench-iq4xs.err"
fi
if [[ $what == quick ]]; then
  timeout 300 "$build/bench/gpu/bench_model" --synthetic step-3.5-flash --layers 45 \
    --recipe iq4_xs --batches 1,2,4,16,64 --prefill 2048,4096 --layer-times=false \
    >"$out/bench-iq4xs.jsonl" 2>"$out/bench-iq4xs.err"
  echo "bench iq4_xs rc=$?"
  grep -v '"layer"' "$out/bench-iq4xs.jsonl"
  tail -3 "$out/bench-iq4xs.err"
fi
if [[ $what == ab || ( $what == quick && -n ${AB_RUNS:-} ) ]]; then
  # AB_RUNS (';'-separated) overrides the list; an empty entry is the defaults.
  IFS=';' read -r -a runs <<<"${AB_RUNS:-;STEPSERVE_GEMV_STREAM=0;STEPSERVE_PDL=0;STEPSERVE_GEMV_MMA=0;--fuse-projections=false --logit-top-k 0}"
  for run in "${runs[@]}"; do
    env_set=() flags=()
    for word in $run; do
      if [[ $word == *=* && $word != --* ]]; then env_set+=("$word"); else flags+=("$word"); fi
    done
    timeout 120 env "${env_set[@]}" "$build/bench/gpu/bench_model" --synthetic step-3.5-flash \
      --layers 45 --recipe iq4_xs --batches ${AB_BATCHES:-1,64} --decode-steps 12 --prefill "" \
      --layer-times=false "${flags[@]}" >"$out/bench-ab.jsonl" 2>"$out/bench-ab.err"
    echo "ab [$run] rc=$?"
    grep decode "$out/bench-ab.jsonl"
    tail -2 "$out/bench-ab.err"
  done
fi
if [[ $what == prefill || $what == q4k ]]; then
  # The prefill kernels: their tests, then 45-layer prefill with the defaults, with the int8 grouped
  # GEMM instead of the F16 one, and with the settings in PREFILL_RUNS (space-separated VAR=value).
  for t in "${targets[@]}"; do
    timeout 200 "$build/tests/gpu/$t" >"$out/$t.log" 2>&1
    echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$out/$t.log" | tr '\n' ' ')"
    grep -E '^\[  FAILED|f16=[123]' "$out/$t.log" | head -30
  done
  read -r -a extra_runs <<<"${PREFILL_RUNS:-}"
  recipe=iq4_xs runs=("" STEPSERVE_GROUPED_GEMM_F16=0 "${extra_runs[@]}")
  [[ $what == q4k ]] && recipe=q4_k_m runs=("" STEPSERVE_GROUPED_GEMM_F16=2)
  for run in "${runs[@]}"; do
    timeout 120 env $run "$build/bench/gpu/bench_model" --synthetic step-3.5-flash --layers 45 \
      --recipe "$recipe" --batches "" --prefill 2048,4096 --layer-times=false \
      >"$out/bench-prefill.jsonl" 2>"$out/bench-prefill.err"
    echo "prefill [$run] rc=$? $(grep prefill "$out/bench-prefill.jsonl" | tr '\n' ' ')"
    tail -2 "$out/bench-prefill.err"
  done
fi
if [[ $what == gemv ]]; then
  for t in gemv_stream_cuda_test gemv_cuda_test moe_gemv_cuda_test; do
    timeout 300 "$build/tests/gpu/$t" >"$out/$t.log" 2>&1
    echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$out/$t.log" | tr '\n' ' ')"
    grep -E '^\[  FAILED|streamed' "$out/$t.log" | head -40
  done
  for stream in 1 0; do
    STEPSERVE_GEMV_STREAM=$stream timeout 60 "$build/bench/gpu/bench_gemv" --quick \
      >"$out/bench-gemv-stream$stream.jsonl" 2>&1
    echo "bench_gemv --quick STEPSERVE_GEMV_STREAM=$stream rc=$?"
    grep -E '"rows":1,|hbm_copy' "$out/bench-gemv-stream$stream.jsonl"
  done
fi
if [[ $what == rows ]]; then
  timeout 300 "$build/tests/gpu/gemv_cuda_test" >"$out/gemv_cuda_test.log" 2>&1
  echo "gemv_cuda_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/gemv_cuda_test.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED' "$out/gemv_cuda_test.log" | head -20
  for mma in 2 0; do
    STEPSERVE_GEMV_MMA=$mma timeout 90 "$build/bench/gpu/bench_gemv" --rows \
      >"$out/bench-gemv-rows-mma$mma.jsonl" 2>&1
    echo "bench_gemv --rows STEPSERVE_GEMV_MMA=$mma rc=$?"
    grep -E '"gemv"' "$out/bench-gemv-rows-mma$mma.jsonl" | grep iq4_xs |
      sed -E 's/.*"type":"([^"]*)","out":([0-9]*),"in":([0-9]*),"rows":([0-9]*).*"us":([0-9.]*).*/\1 \2x\3 rows \4: \5 us/'
  done
  for mma in 2 1 0; do
    STEPSERVE_GEMV_MMA=$mma timeout 150 "$build/bench/gpu/bench_model" --synthetic step-3.5-flash \
      --layers 45 --recipe iq4_xs --batches 4,16 --decode-steps 12 --prefill "" \
      --layer-times=false >"$out/bench-rows-mma$mma.jsonl" 2>"$out/bench-rows-mma$mma.err"
    echo "bench_model STEPSERVE_GEMV_MMA=$mma rc=$?"
    grep decode "$out/bench-rows-mma$mma.jsonl" | cut -c1-110
    tail -2 "$out/bench-rows-mma$mma.err"
  done
fi
if [[ $what == mixes ]]; then
  timeout 240 "$build/bench/gpu/bench_model" --synthetic step-3.5-flash --layers 45 \
    --recipe q4_k_m --batches 1,64 --prefill 2048 >"$out/bench-q4km.jsonl" 2>"$out/bench-q4km.err"
  echo "bench q4_k_m rc=$?"
  grep -v '"layer"' "$out/bench-q4km.jsonl"
  tail -3 "$out/bench-q4km.err"
  timeout 240 "$build/bench/gpu/bench_model" --synthetic step-5 --layers 20 --recipe step5-q2 \
    --batches 1,16 --prefill 2048 >"$out/bench-step5.jsonl" 2>"$out/bench-step5.err"
  echo "bench step-5 q2 (20 layers) rc=$?"
  grep -v '"layer"' "$out/bench-step5.jsonl"
  tail -3 "$out/bench-step5.err"
fi
echo "total: $(($(date +%s) - start)) s"
