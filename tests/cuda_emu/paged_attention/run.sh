#!/usr/bin/env bash
# Host emulation of the decode attention (kernels/attention/paged_attention_cuda.cu:
# PagedAttentionKernel, its split-K combine in the last CTA or in the combine kernels, the head
# gate in the combine) against PagedAttentionRef: the real source under ../prefill_attention's
# emulator (128 threads as coroutines in shuffled orders, warp collectives and barriers once every
# participant has arrived, CTAs in shuffled orders so any split may arrive last). No GPU needed
# (CUDA headers only). Checks head / split / chunk mappings, masks and the combine before device
# time is spent; not the hardware's memory ordering (a PDL wait is a no-op here), not speed.
# Usage: bash tests/cuda_emu/paged_attention/run.sh [BUILD_DIR] [KERNEL_SOURCE]
#   BUILD_DIR: a CMake build of this repository (for libstepserve_quant.a / libstepserve_base.a;
#   default build); KERNEL_SOURCE: a mutated copy of the kernel, to check a bug is caught.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
work=${EMU_WORK:-$(mktemp -d)}
cuda_include=${CUDA_INCLUDE:-/usr/local/cuda/include}
emu=$here/../prefill_attention
python3 "$here/transform.py" "$work" ${2:+"$2"}
libs=$(pkg-config --libs absl_status absl_statusor absl_str_format absl_strings)
# shellcheck disable=SC2086  # $libs is several linker words
g++ -std=c++20 -O1 -w -I "$cuda_include" -I "$root" -I "$emu" -I "$work" "$here/emu_test.cc" \
  "$emu/emu_cuda.cc" "$root/kernels/attention/paged_attention_ref.cc" \
  "$root/kernels/attention/paged_attention_cuda_plan.cc" "$build/engine/quant/libstepserve_quant.a" \
  "$build/engine/base/libstepserve_base.a" $libs -o "$work/emu_test"
# The defaults (compact level 2: the 4-head kernel where a CTA holds 4 heads or fewer, the 8-head
# one up to 8, the 16-head one otherwise), then the early-load and tables-before-wait forms off,
# then every CTA at 4 heads, then at 8 (groups of 12 and 20: passes of 8 + 4 and 8 + 8 + 4), then
# level 1 and level 0 (the 16-head kernel only) (STEPSERVE_ATTN_* read once per process).
"$work/emu_test" 0
STEPSERVE_ATTN_EARLY_LOADS=0 STEPSERVE_ATTN_TABLES_BEFORE_WAIT=0 "$work/emu_test" 0
STEPSERVE_ATTN_CTA_HEADS=4 "$work/emu_test" 0
STEPSERVE_ATTN_CTA_HEADS=8 "$work/emu_test" 0
STEPSERVE_ATTN_COMPACT_HEADS=1 "$work/emu_test" 0
STEPSERVE_ATTN_COMPACT_HEADS=0 "$work/emu_test" 0
# The tensor-core decode kernel (PagedAttentionCudaMmaDecode on; head dims 128 / 192, groups 5-16).
"$work/emu_test" 0 mma
