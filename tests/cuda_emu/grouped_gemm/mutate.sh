#!/usr/bin/env bash
# mutate.sh NAME FILE OLD NEW: applies one source mutation (FILE relative to kernels/, OLD replaced
# once), rebuilds the emulation in $EMU_WORK (default /tmp/stepserve-emu-gemm) and runs every case
# in both cp.async landing modes; prints whether the injected bug was caught. The test is
# test_f16.cc for FILE matmul/gemm_grouped_f16_cuda.cu, test_gemv_mma.cc / test_gemv_grouped.cc for
# the GEMVs' files, else test.cc (EMU_TEST=... overrides:
# a shared header such as mma_iq4_util.cuh is used by both kernels).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
work=${EMU_WORK:-/tmp/stepserve-emu-gemm}/mut_$1
cuda_include=${CUDA_INCLUDE:-/usr/local/cuda/include}
case $2 in
  matmul/gemm_grouped_f16_cuda.cu) default_test=test_f16 ;;
  matmul/gemv_mma_cuda.cu) default_test=test_gemv_mma ;;
  matmul/gemv_q8x_grouped_cuda.cu | matmul/gemv_q8x_rows.cuh) default_test=test_gemv_grouped ;;
  matmul/gemv_q8x_cuda.cu) default_test=test_gemv_one_row ;;
  matmul/dequant_cuda.cu) default_test=test_dequant ;;
  matmul/moe_swiglu_f16.cuh) default_test=test_swiglu_f16 ;;
  matmul/moe_decode_cuda.cu | matmul/moe_down_lean.cuh) default_test=test_moe_down ;;  # gate/up:
    # EMU_TEST=test_moe_gate_up
  *) default_test=test ;;
esac
test=${EMU_TEST:-$default_test}
rm -rf "$work" && mkdir -p "$work"
python3 "$here/transform.py" "$work/shadow" "$2" "$3" "$4" || { echo "$1: TRANSFORM FAILED"; exit 1; }
g++ -std=c++20 -O1 -ffp-contract=off -w ${EMU_CXXFLAGS:-} -I "$work/shadow" -I "$here" -I "$cuda_include" -I "$root" \
  "$here/$test.cc" "$here/emu_cuda.cc" "$root/engine/quant/quant_k.cc" \
  "$root/engine/quant/quant_iq.cc" "$root/engine/quant/quant_tables.cc" \
  "$root/engine/quant/ggml_type.cc" -o "$work/emu" \
  2>"$work/build.log" ||
  { echo "$1: BUILD FAILED"; head -5 "$work/build.log"; exit 1; }
res=""
for mode in 0 1; do
  timeout 300 "$work/emu" $mode 1 >"$work/run$mode.log" 2>&1; rc=$?
  f=$(grep -c "^FAIL" "$work/run$mode.log"); e=$(grep -m1 "EMU FAILURE" "$work/run$mode.log")
  res="$res | late/early=$mode rc=$rc FAIL-cases=$f ${e:+[$e]}"
done
echo "$1 ($test):$res"
