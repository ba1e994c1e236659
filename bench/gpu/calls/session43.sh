#!/usr/bin/env bash
# Session 43's call (an H200 if one comes - then the 45-layer target figures first - else an H100
# at 24 layers; compare only with runs on the same card): fewer instructions per decoded IQ4_XS
# weight in the tensor-core GEMV (Lookup16Pairs without the compiler's selector masks,
# Iq4SubScales: 3 instructions a sub-block scale instead of ~7, the MMA's accumulators starting
# at IntToFloat's bias, the first activation tile unpredicated; bit-identical results by
# construction), A/B against 1f6b2cd built from .gl/base.tar in /tmp/base: the GPU
# tests of the new tree (GEMV, MoE GEMV, whole model), the GEMV alone at 1-16 rows (bench_gemv --rows) and
# decode at 2-64 streams in two alternating rounds. On the H100 it took 151 s (build, tests)
# + 85 s (base build, A/B), the two halves run as calls 1 and 2 (results-v38.txt).
#   (timeout 570 bash bench/gpu/calls/session43.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
export CALL_BENCH_ARGS="--kv-dtype f16"  # what `stepserve serve` uses on a GPU (--kv-dtype auto)
call_build bench_model bench_gemv gemv_cuda_test moe_gemv_cuda_test model_cuda_test stepserve || exit 1
new=$CALL_BUILD base=/tmp/base/build-h200
# The base tree builds while the correctness tests run (they time nothing).
rm -rf /tmp/base && mkdir -p /tmp/base && tar -xf .gl/base.tar -C /tmp/base && cp -r .debs /tmp/base/
mkdir -p /tmp/logs-base  # (call 1 lacked it: the base build failed there)
(cd /tmp/base && CALL_LOGS=/tmp/logs-base call_build bench_model bench_gemv >/tmp/base-build.txt 2>&1) &
base_build=$!
call_test gemv_cuda_test gemv
CALL_TEST_TIMEOUT=150 call_test moe_gemv_cuda_test moe-gemv
CALL_TEST_TIMEOUT=200 call_test model_cuda_test model STEPSERVE_GPU_TEST_MODELS="$(call_model_file)"
wait "$base_build"
head -2 /tmp/base-build.txt
[[ -x $base/bench/gpu/bench_model ]] || { echo "no base build"; cat /tmp/base-build.txt; exit 1; }
if [[ -z ${CALL_LAYERS:-} ]]; then  # an H200: the target figures first (none since session 26)
  call_ab 1,4,16,64 2048
  CALL_RECIPE=q4_k_m call_ab 1 ""
fi
for b in "$new" "$base"; do
  echo "bench_gemv --rows ($b)"
  "$b/bench/gpu/bench_gemv" --rows 2>&1 | grep iq4_xs |
    sed -nE 's/.*("out":[0-9]+,"in":[0-9]+,"rows":[0-9]+).*("us":[0-9.]+).*("fraction_of_copy":[0-9.]+).*/\1 \2 \3/p'
done
for round in 1 2; do
  # A second round only while it fits the 560-s limit (45 layers on an H200 take longer).
  # shellcheck disable=SC2154  # call_start: set by call-lib-h200.sh
  [[ $round == 2 && $(($(date +%s) - call_start)) -gt 400 ]] && { echo "no time for round 2"; break; }
  for b in "$new" "$base"; do
    CALL_BUILD=$b call_ab 2,4,8,12,16,64 "" STEPSERVE_ROUND="$round" BUILD="$b"
  done
done
call_done
