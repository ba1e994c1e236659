#!/usr/bin/env bash
# Session 45's call (ran once, at 3c3cc66 on an H100: bench/gpu/results-v39.txt; written when
# the switches below were off by default): session44.sh (never run: no machine started in session
# 44) plus session 45's STEPSERVE_GROUPED_WHOLE=3. On an H200 the 45-layer target figures come first (none since
# session 26); on an H100, 24 layers (compare only with H100 runs).
# What it checks, against e390a40 (session 43's head) built from .gl/base.tar in /tmp/base:
#  - Iq4XsSubScale (gemv_block_util.cuh): the IQ4_XS sub-block scale by two shifts of lane
#    constants, bit for bit the old value; SASS loops one-row GEMV 355 -> 339, batch-1 MoE gate/up
#    331 -> 319, lean down 453 -> 441 (scripts/sass.py, undecoded VIADDs counted). Decode at 1 / 2
#    streams (the batch-1 and batch-2 kernels) against the base.
#  - STEPSERVE_GEMV_ONE_ROW_WHOLE=1 (gemv_q8x_cuda.cu, off by default): the one-row IQ4_XS
#    GEMV's whole iterations without per-step guards (SASS per 4 steps ~252 instructions for a
#    row's last iteration - all a 4096-wide row has - and ~270 with refills, against 339), same
#    arithmetic; its tests, the GEMV alone and decode at 1 / 2 streams against the default.
#  - STEPSERVE_MOE_GATE_UP_WHOLE=1 (moe_decode_cuda.cu, off): the same for the IQ4_XS MoE gate /
#    up kernel at 1-2 tokens (per iteration of 2 steps and 2 rows 283 / 240 against 305-319);
#    the MoE GEMV test with it and decode at 1 / 2 streams with both switches.
#  - STEPSERVE_GEMV_MMA_8WARP_OUT (gemv_mma_cuda.cu): output counts below it take the 8-warp
#    tensor-core GEMV (default 8192). The 4-warp kernel measured slower than the base's on 12288 x
#    4096 at 12 / 16 rows in session 43; a huge value sends every output count to 8 warps: the
#    GEMV alone (bench_gemv --rows) and decode at 8-16 streams both ways.
#  - STEPSERVE_GROUPED_WHOLE=3 (gemv_q8x_grouped_cuda.cu, off): the grouped GEMV's IQ4_XS rows
#    of exactly 5 blocks (the experts' down; bit 1) and 16 blocks (their gate / up; bit 2) through
#    kernels compiled for that count (no per-step guard or refill bound). SASS per row block's
#    chunk of 1 / 2 / 4 activation rows, store included: down 547 / 689 / 948 -> 386 / 561 / 806,
#    gate / up (two iterations) ~855 / 1083 / 1452 -> 628 / 886 / 1245. moe_gemv_cuda_test
#    compares both bit for bit itself (48-token case; 2-4-token decode cases 4096 x 1280) and
#    checks the launches took them; decode at 16 / 32 / 64 streams with 3, 2 and without.
# Tests first (gemv also with every output count on 8 warps; gemv and the MoE GEMV test compare
# the whole-iteration forms bit for bit themselves; the model with both), then the A/B.
#   mkdir -p .gl && git archive HEAD -o .gl/head.tar && git archive e390a40 -o .gl/base.tar
#   (timeout 570 bash bench/gpu/calls/session45.sh [short] > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
export CALL_BENCH_ARGS="--kv-dtype f16"  # what `stepserve serve` uses on a GPU (--kv-dtype auto)
eight=STEPSERVE_GEMV_MMA_8WARP_OUT=1000000000 whole=STEPSERVE_GEMV_ONE_ROW_WHOLE=1
gu_whole=STEPSERVE_MOE_GATE_UP_WHOLE=1 gw=STEPSERVE_GROUPED_WHOLE=3 gw_long=STEPSERVE_GROUPED_WHOLE=2
call_build bench_model bench_gemv gemv_cuda_test moe_gemv_cuda_test model_cuda_test stepserve || exit 1
new=$CALL_BUILD base=/tmp/base/build-h200
rm -rf /tmp/base && mkdir -p /tmp/base /tmp/logs-base && tar -xf .gl/base.tar -C /tmp/base &&
  cp -r .debs /tmp/base/
(cd /tmp/base && CALL_LOGS=/tmp/logs-base call_build bench_model bench_gemv >/tmp/base-build.txt 2>&1) &
base_build=$!
call_test gemv_cuda_test gemv
call_test gemv_cuda_test gemv-8warp "$eight"
CALL_TEST_TIMEOUT=150 call_test moe_gemv_cuda_test moe-gemv
call_test moe_gemv_cuda_test moe-gemv-whole "$gu_whole" GTEST_FILTER="*MoeGemvCudaDecodeTest.*"
if [[ ${1:-} != short ]]; then  # `short` (~300 s, for little device time): no model tests, one round
  CALL_TEST_TIMEOUT=200 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
  CALL_TEST_TIMEOUT=200 call_test model_cuda_test model-whole \
    STEPSERVE_GPU_TEST_MODELS="$(call_model_file)" "$whole" "$gu_whole" "$gw"
fi
wait "$base_build"
head -2 /tmp/base-build.txt
[[ -x $base/bench/gpu/bench_model ]] || { echo "no base build"; cat /tmp/base-build.txt; exit 1; }
if [[ -z ${CALL_LAYERS:-} ]]; then  # an H200: the target figures first
  call_ab 1,4,16,64 2048
  CALL_RECIPE=q4_k_m call_ab 1 ""
fi
gemv_rows() {  # bench_gemv --rows of build $1 under env $2: out x in x rows, us, fraction of copy
  echo "bench_gemv --rows ($1 ${2:-})"
  env "${2:-STEPSERVE_UNUSED=0}" "$1/bench/gpu/bench_gemv" --rows 2>&1 | grep iq4_xs |
    sed -nE 's/.*"out":([0-9]+),"in":([0-9]+),"rows":([0-9]+).*"us":([0-9.]+).*"fraction_of_copy":([0-9.]+).*/\1x\2 r\3 \4 us \5/p' |
    tr '\n' ';'
  echo
}
gemv_rows "$new"
gemv_rows "$new" "$eight"
gemv_rows "$new" "$whole"
gemv_rows "$base"
for round in 1 2; do
  # A second round only while it fits the 570-s limit (45 layers on an H200 take longer).
  # shellcheck disable=SC2154  # call_start: set by call-lib-h200.sh
  [[ $round == 2 && ( ${1:-} == short || $(($(date +%s) - call_start)) -gt 420 ) ]] &&
    { echo "no round 2"; break; }
  CALL_BUILD=$new call_ab 1,2,8,12,16 "" STEPSERVE_ROUND="$round"
  CALL_BUILD=$new call_ab 16,32,64 "" "$gw" STEPSERVE_ROUND="$round"
  CALL_BUILD=$new call_ab 16,32,64 "" "$gw_long" STEPSERVE_ROUND="$round"
  CALL_BUILD=$new call_ab 16,32,64 "" STEPSERVE_ROUND="$round"
  CALL_BUILD=$new call_ab 8,12,16 "" "$eight" STEPSERVE_ROUND="$round"
  CALL_BUILD=$new call_ab 1,2 "" "$whole" STEPSERVE_ROUND="$round"
  CALL_BUILD=$new call_ab 1,2 "" "$whole" "$gu_whole" STEPSERVE_ROUND="$round"
  CALL_BUILD=$base call_ab 1,2,8,12,16 "" STEPSERVE_ROUND="$round"
done
call_done
