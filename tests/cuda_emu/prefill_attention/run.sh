#!/usr/bin/env bash
# Host emulation of PrefillAttentionKernel (kernels/attention/prefill_attention_cuda.cu) against
# PagedAttentionRef: the real kernel source (device and host parts) with its inline-asm wrappers
# (ldmatrix, mma.m16n8k16, cp.async) replaced by emulated ones (emu_cuda.*), 128 threads as
# coroutines, warp collectives and barriers executed once every participant has arrived. No GPU
# needed (CUDA headers only). Checks fragment mappings, masks, tiling and barriers before device
# time is spent; not speed, not the hardware's own MMA.
# Usage: bash tests/cuda_emu/prefill_attention/run.sh [BUILD_DIR] [KERNEL_SOURCE]
#   BUILD_DIR: a CMake build of this repository (for libstepserve_quant.a / libstepserve_base.a;
#   default build); KERNEL_SOURCE: a mutated copy of the kernel, to check a bug is caught.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
work=${EMU_WORK:-$(mktemp -d)}
cuda_include=${CUDA_INCLUDE:-/usr/local/cuda/include}
python3 "$here/transform.py" "$work" ${2:+"$2"}
libs=$(pkg-config --libs absl_status absl_statusor absl_str_format absl_strings)
g++ -std=c++20 -O1 -w -I "$cuda_include" -I "$root" -I "$here" -I "$work" "$here/emu_test.cc" \
  "$here/emu_cuda.cc" "$root/kernels/attention/paged_attention_ref.cc" \
  "$root/kernels/attention/paged_attention_cuda_plan.cc" "$build/engine/quant/libstepserve_quant.a" \
  "$build/engine/base/libstepserve_base.a" $libs -o "$work/emu_test"
# cp.async landing at the wait / at issue; one query head per CTA and two sharing K / V tiles.
for shared in 0 1; do
  for mode in 0 1; do STEPSERVE_PREFILL_SHARED_KV=$shared "$work/emu_test" 0 "$mode"; done
done
