#!/usr/bin/env bash
# Injected bugs in SwiGluRowsF16Kernel (kernels/matmul/moe_swiglu_f16.cuh), each run through
# test_swiglu_f16 by mutate.sh: every one must print FAIL cases (session 26: all 5 caught).
here=$(cd "$(dirname "$0")" && pwd)
f=matmul/moe_swiglu_f16.cuh
export EMU_TEST=test_swiglu_f16
bash "$here/mutate.sh" pair_second_half "$f" "k0 + 16" "k0 + 8"
bash "$here/mutate.sh" natural_swapped "$f" "__halves2half2(a[2 * j], a[2 * j + 1])" \
  "__halves2half2(a[2 * j + 1], a[2 * j])"
bash "$here/mutate.sh" no_saturation "$f" "fminf(fmaxf(z, -65504.f), 65504.f)" "z"
bash "$here/mutate.sh" chunk_offset "$f" "xh + r * n_ff + 8 * c" "xh + r * n_ff + 4 * c"
bash "$here/mutate.sh" pair_interleave "$f" "__halves2half2(a[j], b[j])" "__halves2half2(b[j], a[j])"
