#!/usr/bin/env bash
# Session 16, call 3: the rare tiny-model mismatch (session 15 call 4: "f32" TinyModelMatchesCpu,
# one decode row 0.041; session 16 call 2: "mix" TinyModelWithF16KvCacheMatchesCpu, decode step
# 10, 0.0088 - both in exact mode, which takes none of the int8 GEMV paths) under
# compute-sanitizer: initcheck (a read of device memory nothing wrote would vary from run to run)
# and racecheck (shared-memory hazards inside a CTA); reports to $OUT. Then the v15 figures with the
# split IQ4_XS lookup on by default.
#   (timeout 560 bash bench/gpu/calls/session16-sanitize.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
call_build model_cuda_test stepserve bench_model || exit 1
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "sanitizer: ${san:-none}"
tests='Recipes/ModelCudaTest.TinyModelMatchesCpu/0:Recipes/ModelCudaTest.TinyModelWithF16KvCacheMatchesCpu/1'
for tool in initcheck racecheck; do
  [[ -n $san ]] || break
  s=$(date +%s)
  timeout 150 "$san" --tool "$tool" --print-limit 30 "$CALL_BUILD/tests/gpu/model_cuda_test" \
    --gtest_filter="$tests" >"$OUT/sanitizer-$tool.txt" 2>&1
  echo "$tool rc=$? $(($(date +%s) - s)) s: $(grep -E '^\[  (PASSED|FAILED)|ERROR SUMMARY|RACECHECK SUMMARY' \
    "$OUT/sanitizer-$tool.txt" | tr '\n' ' ')"
  grep -E "^=========.*(Uninitialized|hazard|Race|at .* in |by thread)" "$OUT/sanitizer-$tool.txt" |
    sort | uniq -c | sort -rn | head -12
done
call_ab 1,2,3,4,8,16,32 ""
call_ab 64 2048,4096
call_done
