#!/usr/bin/env bash
# Host emulation of GemmMmaIq4XsGroupedKernel (kernels/matmul/gemm_grouped_mma_cuda.cu) against a
# double-precision reference: the real kernel source with its inline-asm wrappers (mma.m16n8k32,
# cp.async, cvt) replaced by emulated ones (emu_cuda.*), 128 threads as coroutines in shuffled
# orders, cp.async landing at issue or at the wait. No GPU needed (CUDA headers only). A check of
# indexing, fragment mapping and barriers before device time is spent, not of speed or of the
# hardware's own MMA. Usage: bash tests/cuda_emu/grouped_gemm/run.sh [SEEDS...]
#   ./mutate.sh NAME FILE OLD NEW (in a work dir made by this script) runs one injected bug.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
work=${EMU_WORK:-$(mktemp -d)}
cuda_include=${CUDA_INCLUDE:-/usr/local/cuda/include}
python3 "$here/transform.py" "$work/shadow"
g++ -std=c++20 -O1 -ffp-contract=off -w -I "$work/shadow" -I "$here" -I "$cuda_include" -I "$root" \
  "$here/test.cc" "$here/emu_cuda.cc" -o "$work/emu_test"
for seed in "${@:-1 2 3}"; do
  for mode in 0 1; do
    "$work/emu_test" "$mode" "$seed"
  done
done
