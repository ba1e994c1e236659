#!/usr/bin/env bash
# Host emulation of the grouped GEMMs against double-precision references: GemmMmaIq4XsGroupedKernel
# (kernels/matmul/gemm_grouped_mma_cuda.cu, int8, 128 threads; test.cc) and
# GemmF16Iq4XsGroupedKernel with its activation converter (gemm_grouped_f16_cuda.cu, F16, 256
# threads; test_f16.cc); also the tensor-core GEMV, plain and wide (gemv_mma_cuda.cu;
# test_gemv_mma.cc), the grouped dp4a GEMV (gemv_q8x_grouped_cuda.cu; test_gemv_grouped.cc) and
# the one-row GEMVs (gemv_q8x_cuda.cu; test_gemv_one_row.cc), and the few-token MoE kernels of
# moe_decode_cuda.cu: down + combine, lean and cursor forms (test_moe_down.cc), and gate/up with
# its block quantization (test_moe_gate_up.cc; shuffles of partial warps are emulated), and the
# prefill MoE's SwiGLU-to-F16 kernel against SwiGLU + the converter (test_swiglu_f16.cc), and the
# staged and IQ4_XS dequantization kernels against the generic one (test_dequant.cc). The real
# kernel sources with their inline-asm wrappers (mma.sync, cp.async, cvt, f16x2 arithmetic)
# replaced by emulated ones (emu_cuda.*), a CTA's threads as coroutines in shuffled orders,
# cp.async landing at issue or at the wait. No GPU needed (CUDA headers only). A check of
# indexing, fragment mapping and barriers before device time is spent, not of speed or of the
# hardware's own MMA.
# Usage: bash tests/cuda_emu/grouped_gemm/run.sh [SEEDS...]   (EMU_TESTS="test_f16": one kernel;
#   EMU_CXXFLAGS: extra compiler flags, e.g. -D switches of the kernel sources)
#   ./mutate.sh NAME FILE OLD NEW runs one injected bug; ./mutations_f16.sh the F16 kernel's list.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
work=${EMU_WORK:-$(mktemp -d)}
cuda_include=${CUDA_INCLUDE:-/usr/local/cuda/include}
tests=${EMU_TESTS:-test test_f16 test_gemv_mma test_gemv_grouped test_gemv_one_row test_moe_down test_moe_gate_up test_swiglu_f16 test_dequant}
quant_sources=("$root/engine/quant/quant_k.cc" "$root/engine/quant/quant_iq.cc" "$root/engine/quant/ggml_type.cc"
  "$root/engine/quant/quant_tables.cc")
python3 "$here/transform.py" "$work/shadow"
for t in $tests; do
  g++ -std=c++20 -O1 -ffp-contract=off -w ${EMU_CXXFLAGS:-} -I "$work/shadow" -I "$here" -I "$cuda_include" \
    -I "$root" "$here/$t.cc" "$here/emu_cuda.cc" "$here/wgmma_tu.cc" "${quant_sources[@]}" \
    -o "$work/emu_$t"
done
[ $# -gt 0 ] || set -- 1 2 3  # (a quoted "${@:-1 2 3}" would be the one word "1 2 3")
for t in $tests; do
  # The one-row GEMVs with and without their weights before the PDL wait (bits 1 and 8), one row
  # per warp and (3 CTAs) warps looping over rows; the IQ4_XS one's whole iterations both ways.
  envs=("STEPSERVE_UNUSED=0")
  [[ $t == test_gemv_one_row ]] && envs=("STEPSERVE_WEIGHTS_BEFORE_WAIT=0"
    "STEPSERVE_WEIGHTS_BEFORE_WAIT=9" "STEPSERVE_WEIGHTS_BEFORE_WAIT=0 STEPSERVE_GEMV_ROW_CTAS=3"
    "STEPSERVE_WEIGHTS_BEFORE_WAIT=9 STEPSERVE_GEMV_ROW_CTAS=3"
    "STEPSERVE_GEMV_ONE_ROW_WHOLE=1" "STEPSERVE_GEMV_ONE_ROW_WHOLE=1 STEPSERVE_GEMV_ROW_CTAS=3")
  # The grouped GEMV's IQ4_XS short rows with the whole-row ring (the default), depth 4 under the
  # same cap and the former kernel (STEPSERVE_GROUPED_SHORT_DEPTH 5 / 4 / 1), with the kernels
  # compiled for rows of exactly 5 (short) and 16 (long) blocks (STEPSERVE_GROUPED_WHOLE=3, the
  # default) and without them (0).
  [[ $t == test_gemv_grouped ]] && envs=("STEPSERVE_GROUPED_SHORT_DEPTH=5"
    "STEPSERVE_GROUPED_SHORT_DEPTH=4" "STEPSERVE_GROUPED_SHORT_DEPTH=1"
    "STEPSERVE_GROUPED_WHOLE=0")
  # The gate/up kernel with one block arrival per warp and per CTA (STEPSERVE_MOE_CTA_ARRIVAL),
  # and the IQ4_XS one's whole iterations (STEPSERVE_MOE_GATE_UP_WHOLE, with the CTA arrival; on
  # by default since session 45) and without.
  [[ $t == test_moe_gate_up ]] && envs=("STEPSERVE_MOE_CTA_ARRIVAL=0" "STEPSERVE_MOE_CTA_ARRIVAL=1"
    "STEPSERVE_MOE_CTA_ARRIVAL=1 STEPSERVE_MOE_GATE_UP_WHOLE=0")
  # The grouped F16 GEMM with every chunk 8 column tiles wide, with narrow last chunks (both
  # without wide chunks), with chunks of 128 pairs for every type that has them (IQ4_XS's with all
  # 8 sub-blocks unrolled, the default) and IQ4_XS's wide kernel unrolled 4.
  [[ $t == test_f16 ]] && envs=("STEPSERVE_GEMM_F16_NARROW_TAILS=0 STEPSERVE_GEMM_F16_WIDE=0"
    "STEPSERVE_GEMM_F16_NARROW_TAILS=1 STEPSERVE_GEMM_F16_WIDE=0" "STEPSERVE_GEMM_F16_WIDE=2"
    "STEPSERVE_GEMM_F16_WIDE_UNROLL8=0" "STEPSERVE_GEMM_F16_WGMMA=1" "STEPSERVE_GEMM_F16_WGMMA=2")
  for e in "${envs[@]}"; do
    for seed in "$@"; do
      for mode in 0 1; do
        # shellcheck disable=SC2086
        env $e "$work/emu_$t" "$mode" "$seed"
      done
    done
  done
done
