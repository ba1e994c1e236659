#!/usr/bin/env bash
# Helpers for one device call on the H200 host, sourced by a call script (bench/gpu/calls/):
# build the named targets, run GPU tests and bench_model A/B runs with a timeout per step, and
# print one summary line per step as it ends. Run the call script with its output redirected to
# one file under $OUT (at most 8 files come back; a call killed at its limit returns no output
# tail, but the file written so far comes back):
#   (timeout 540 bash bench/gpu/calls/NAME.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
# Per-step logs stay in $CALL_LOGS (default /tmp/logs); tar them into $OUT if needed.
# Times seen on the H200 (session 13): build 33-47 s, moe_gemv_cuda_test 48-57 s, model_cuda_test
# 55-58 s, a 45-layer bench_model process 6-7 s at batches 1,2 and 20-36 s at 16-64.
set -uo pipefail
CALL_LOGS=${CALL_LOGS:-/tmp/logs}
CALL_BUILD=${CALL_BUILD:-build-h200}
CALL_MODELS=${CALL_MODELS:-/tmp/stepserve-models}
mkdir -p "$CALL_LOGS" "$CALL_MODELS"
call_start=$(date +%s)

# call_build TARGET...: configure and build from the bundled Debian packages (docs/cuda-host.md)
# in $CALL_BUILD, with the extra CMake arguments of $CALL_CMAKE_ARGS (e.g. a second tree built with
# -DCMAKE_CUDA_FLAGS=-DSOME_SWITCH=1 for a compile-time A/B: CALL_BUILD=build-b call_build ...).
call_build() {
  export NCCL_HOME=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
  # shellcheck disable=SC2086
  bash scripts/bundle-deps.sh build "$CALL_BUILD" "$@" -- -DCMAKE_BUILD_TYPE=Release \
    ${CALL_CMAKE_ARGS:-} >"$CALL_LOGS/build.log" 2>&1 ||
    { grep -E "error" "$CALL_LOGS/build.log" | head; tail -5 "$CALL_LOGS/build.log"; return 1; }
  echo "build $(($(date +%s) - call_start)) s"
  source <(bash scripts/bundle-deps.sh env)
  nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv,noheader
  # An H100 (about 80 GB) holds 24 of the 45 IQ4_XS layers (107.7 GB whole): A/B runs there use
  # 24 unless the call sets CALL_LAYERS; its figures compare only with runs on the same card.
  local mib
  mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  if [[ -z ${CALL_LAYERS:-} && ${mib:-0} -lt 100000 ]]; then
    export CALL_LAYERS=24
    echo "GPU memory ${mib} MiB: CALL_LAYERS=24"
  fi
}

# call_test TEST LOG [VAR=value...]: one GPU test binary under `env VAR=value...` (GTEST_FILTER
# picks cases), 100 s at most; prints its result line and the first failures.
call_test() {
  local t=$1 log=$2
  shift 2
  local s=$(date +%s)
  timeout "${CALL_TEST_TIMEOUT:-100}" env "$@" "$CALL_BUILD/tests/gpu/$t" >"$CALL_LOGS/$log.log" 2>&1
  echo "$t [$*] rc=$? $(($(date +%s) - s)) s" \
    "$(grep -E '^\[  (PASSED|FAILED)' "$CALL_LOGS/$log.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure" -A3 "$CALL_LOGS/$log.log" | head -12
}

# call_model_file: the 4-layer real-shape IQ4_XS file model_cuda_test compares against the CPU,
# written by `stepserve make-model` (built here if the call's targets did not include it: session
# 28's call 1 named none, and the model test then found no file).
call_model_file() {
  local f=$CALL_MODELS/flash4.gguf
  if [[ ! -f $f ]]; then
    [[ -x $CALL_BUILD/server/stepserve ]] ||
      cmake --build "$CALL_BUILD" --parallel "$(nproc)" --target stepserve \
        >"$CALL_LOGS/build-stepserve.log" 2>&1
    "$CALL_BUILD/server/stepserve" make-model --preset step-3.5-flash --layers 4 \
      --recipe iq4_xs --out "$f" >"$CALL_LOGS/make-model.log" 2>&1 ||
      echo "make-model failed: $(tail -2 "$CALL_LOGS/make-model.log")" >&2
  fi
  echo "$f"
}

# call_ab BATCHES PREFILL [VAR=value...]: one bench_model process (12 decode steps) of the
# $CALL_PRESET model (default step-3.5-flash) with $CALL_LAYERS layers (45) in the $CALL_RECIPE
# recipe (iq4_xs) and the $CALL_TYPES overrides (bench_model --types, e.g. exp-gate-up=iq3_s),
# plus the bench_model flags in $CALL_BENCH_ARGS (e.g. "--kv-dtype f16 --context 4096"), 90 s at
# most; prints ms per step per batch and prefill tok/s.
call_ab() {
  local batches=$1 prefill=$2
  shift 2
  local s=$(date +%s)
  timeout 90 env "$@" "$CALL_BUILD/bench/gpu/bench_model" --synthetic "${CALL_PRESET:-step-3.5-flash}" \
    --layers "${CALL_LAYERS:-45}" --recipe "${CALL_RECIPE:-iq4_xs}" ${CALL_TYPES:+--types "$CALL_TYPES"} \
    --batches "$batches" --decode-steps 12 --prefill "$prefill" ${CALL_BENCH_ARGS:-} \
    --layer-times=false >"$CALL_LOGS/ab.jsonl" 2>"$CALL_LOGS/ab.err"
  # Per decode batch its ms per step and fraction of the HBM roofline (bench_model's weight and KV
  # bytes a step over the measured copy bandwidth), per prompt its prefill rate.
  echo "ab ${CALL_PRESET:-step-3.5-flash}/${CALL_LAYERS:-45} ${CALL_RECIPE:-iq4_xs}${CALL_TYPES:+ $CALL_TYPES}${CALL_BENCH_ARGS:+ $CALL_BENCH_ARGS} [$*] rc=$? $(($(date +%s) - s)) s" "$(grep -E 'decode|prefill' "$CALL_LOGS/ab.jsonl" |
    sed -nE -e 's/.*("batch":[0-9]+),"context":[0-9]+,("ms_per_step":[0-9.]+).*"fraction_of_roofline":([0-9.]+).*/\1,\2,"roofline":\3/p' \
      -e 's/.*("prompt_tokens":[0-9]+,"seconds":[0-9.]+,"tokens_per_s":[0-9.]+).*/\1/p' |
    tr '\n' ' ')"
  grep -h '"memory"' "$CALL_LOGS/ab.jsonl"
  tail -1 "$CALL_LOGS/ab.err"
}

# call_ncu NAME KERNEL_REGEX COUNT BENCH_ARGS [VAR=value...]: ncu sections of the first COUNT
# launches of kernels matching KERNEL_REGEX in a 4-layer IQ4_XS bench_model run (BENCH_ARGS: its
# batch / context / step flags), 150 s at most; the report goes to $OUT/ncu-NAME.txt.
call_ncu() {
  local name=$1 regex=$2 count=$3 args=$4
  shift 4
  local s=$(date +%s)
  timeout 150 env "$@" ncu --kernel-name "regex:$regex" --launch-count "$count" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
    --section LaunchStats --section SchedulerStats --section WarpStateStats \
    "$CALL_BUILD/bench/gpu/bench_model" --synthetic step-3.5-flash --layers 4 --recipe iq4_xs \
    $args --prefill "" --layer-times=false >"${OUT:-$CALL_LOGS}/ncu-$name.txt" 2>&1
  echo "ncu $name [$*] rc=$? $(($(date +%s) - s)) s"
  grep -E "^  [A-Za-z].*\(|Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|Achieved Occupancy|Registers Per" \
    "${OUT:-$CALL_LOGS}/ncu-$name.txt" | head -40
}

# call_ncu_source NAME KERNEL_REGEX BENCH_ARGS [VAR=value...]: where one launch of a kernel
# stalls, by SASS instruction: ncu's SourceCounters (warp-state sampling per PC) of the first
# launch matching KERNEL_REGEX in a 4-layer IQ4_XS bench_model run, exported as the source page
# (CSV, SASS) to $OUT/src-NAME.csv; bench/gpu/ncu_source_top.py prints the instructions with the
# most samples and the columns the export has. The SASS lines are the ones scripts/sass.py prints
# on the host (same compiler), so a hot spot can be read against the source there.
call_ncu_source() {
  local name=$1 regex=$2 args=$3
  shift 3
  local s=$(date +%s) rep="${OUT:-$CALL_LOGS}/src-$name"
  timeout 150 env "$@" ncu --kernel-name "regex:$regex" --launch-count 1 \
    --section SourceCounters --section WarpStateStats -f -o "$rep" \
    "$CALL_BUILD/bench/gpu/bench_model" --synthetic step-3.5-flash --layers 4 --recipe iq4_xs \
    $args --prefill "" --layer-times=false >"$CALL_LOGS/src-$name.log" 2>&1
  local rc=$?
  # --print-source picks the SASS view where this ncu has the option; without it, the default.
  timeout 60 ncu -i "$rep.ncu-rep" --page source --csv --print-source sass >"$rep.csv" 2>&1 ||
    timeout 60 ncu -i "$rep.ncu-rep" --page source --csv >"$rep.csv" 2>&1
  echo "ncu-source $name [$*] rc=$rc/$? $(($(date +%s) - s)) s"
  rm -f "$rep.ncu-rep"
  python3 bench/gpu/ncu_source_top.py "$rep.csv" 40 || tail -5 "$rep.csv"
}

call_done() { echo "total $(($(date +%s) - call_start)) s"; }

# call_ncu_stalls NAME KERNEL_REGEX COUNT BENCH_ARGS [VAR=value...]: as call_ncu, but the stall
# reasons per issued instruction (cycles a warp spends in each, averaged over issues) and the
# instruction count, for "issue-bound or latency-bound, and waiting on what"; $OUT/ncu-NAME.txt.
call_ncu_stalls() {
  local name=$1 regex=$2 count=$3 args=$4
  shift 4
  local s=$(date +%s) m="" r
  for r in long_scoreboard short_scoreboard wait math_pipe_throttle mio_throttle lg_throttle \
    not_selected selected no_instruction barrier membar branch_resolving dispatch_stall drain; do
    m+="smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio,"
  done
  m+="smsp__inst_executed.sum,smsp__issue_active.avg.per_cycle_active,gpu__time_duration.sum"
  timeout 150 env "$@" ncu --kernel-name "regex:$regex" --launch-count "$count" --metrics "$m" \
    "$CALL_BUILD/bench/gpu/bench_model" --synthetic step-3.5-flash --layers 4 --recipe iq4_xs \
    $args --prefill "" --layer-times=false >"${OUT:-$CALL_LOGS}/ncu-$name.txt" 2>&1
  echo "ncu-stalls $name [$*] rc=$? $(($(date +%s) - s)) s"
  grep -E "^  [A-Za-z].*\(|stalled|inst_executed|issue_active|time_duration" \
    "${OUT:-$CALL_LOGS}/ncu-$name.txt" | sed 's/smsp__average_warps_issue_stalled_//' | head -60
}

# call_graph_profile NAME BATCHES [VAR=value...]: each kernel's marginal cost inside the replayed
# decode step (bench_model --graph-profile: every kernel kind of the step graph disabled in turn,
# engine/backend/cuda/graph_kernel_profile.h) at the call's layers and recipe, 10 timed replays
# per sample, 240 s at most; the JSON lines go to $OUT/graph-NAME.jsonl, and per batch the full
# step, the sum of the marginal costs and the 14 costliest kinds are printed.
call_graph_profile() {
  local name=$1 batches=$2
  shift 2
  local s=$(date +%s) f="${OUT:-$CALL_LOGS}/graph-$name.jsonl"
  timeout 240 env "$@" "$CALL_BUILD/bench/gpu/bench_model" --synthetic "${CALL_PRESET:-step-3.5-flash}" \
    --layers "${CALL_LAYERS:-45}" --recipe "${CALL_RECIPE:-iq4_xs}" --batches "$batches" \
    --decode-steps 4 --repeats 1 --prefill "" --layer-times=false --graph-profile 10 >"$f" \
    2>"$CALL_LOGS/graph-$name.err"
  echo "graph-profile $name ${CALL_LAYERS:-45} layers [$*] rc=$? $(($(date +%s) - s)) s"
  python3 - "$f" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    if '"graph_profile"' not in line:
        continue
    r = json.loads(line)
    rows.setdefault(r["rows"], []).append(r)
for n, rs in sorted(rows.items()):
    for r in rs:
        if r["graph_profile"] == "step":
            print(f"rows {n}: full {r['full_us']:.1f} us ({r['full_min_us']:.1f}-{r['full_max_us']:.1f}),"
                  f" {r['kernel_nodes']} kernels in {r['kinds']} kinds, sum of marginals {r['sum_marginal_us']:.1f}")
        elif r["graph_profile"] != "kernel":
            print(f"rows {n}: {r}")
    for r in [r for r in rs if r["graph_profile"] == "kernel"][:14]:
        print(f"  {r['marginal_us']:8.1f} us {r['nodes']:4d} x {r['per_node_us']:6.2f}"
              f" grid {r['grid']:>12} block {r['block']:>8} {r['kernel'][:110]}")
PY
  tail -2 "$CALL_LOGS/graph-$name.err"
}

# call_timeline NAME BATCHES [VAR=value...]: the device's kernel timeline of one replayed decode
# step per batch (bench_model --timeline 2, CUPTI; bench/gpu/kernel_timeline.h) into
# $OUT/timeline-NAME.jsonl; prints per batch the step's span and busy time and the kernel kinds by
# the time they add to the step (the part of it that ends in their kernels), with mean duration
# and mean lead (start minus the previous kernel's end: negative where PDL overlapped them).
call_timeline() {
  local name=$1 batches=$2
  shift 2
  local s=$(date +%s) f="${OUT:-$CALL_LOGS}/timeline-$name.jsonl"
  timeout 240 env "$@" "$CALL_BUILD/bench/gpu/bench_model" --synthetic "${CALL_PRESET:-step-3.5-flash}" \
    --layers "${CALL_LAYERS:-45}" --recipe "${CALL_RECIPE:-iq4_xs}" --batches "$batches" \
    --decode-steps 4 --repeats 1 --prefill "" --layer-times=false --timeline 2 >"$f" \
    2>"$CALL_LOGS/timeline-$name.err"
  echo "timeline $name ${CALL_LAYERS:-45} layers [$*] rc=$? $(($(date +%s) - s)) s"
  python3 - "$f" <<'PY'
import json, sys
rows, n = {}, None
for line in open(sys.argv[1]):
    if '"timeline"' not in line:
        continue
    r = json.loads(line)
    n = r.get("rows", n)  # the per-kernel lines belong to the step line before them
    rows.setdefault(n, []).append(r)
for n, rs in sorted(rows.items()):
    for r in rs:
        if r["timeline"] == "step":
            print(f"rows {n}: span {r['span_us']:.1f} us, busy {r['busy_us']:.1f} us,"
                  f" {r['kernels']} kernels in {r['kinds']} kinds")
        elif r["timeline"] not in ("kind", "kernel"):
            print(f"rows {n}: {r}")
    for r in [r for r in rs if r["timeline"] == "kind"][:16]:
        print(f"  adds {r['adds_us']:8.1f} us {r['count']:4d} x dur {r['mean_dur_us']:6.2f}"
              f" adds {r['mean_adds_us']:6.2f} lead {r['mean_lead_us']:6.2f}"
              f" grid {r['grid']:>10} {r['kernel'][:90]}")
PY
  tail -2 "$CALL_LOGS/timeline-$name.err"
}
