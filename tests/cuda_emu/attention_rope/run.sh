#!/usr/bin/env bash
# Host emulation of the decode attention with its own q / k norm + RoPE and KV append
# (kernels/attention/paged_attention_cuda.cu's kRope kernels, paged_attention_cuda_rope.cuh)
# against QkNormRopeAppendCuda then the plain attention, all from their real sources under
# ../prefill_attention's emulator (threads as coroutines in shuffled orders, CTAs in shuffled
# orders): outputs and pages equal bit for bit. No GPU needed (CUDA headers only). Checks the
# head / split / chunk mappings and the new key's placement before device time is spent; not the
# hardware's memory ordering, not speed.
# Usage: bash tests/cuda_emu/attention_rope/run.sh [BUILD_DIR] [KERNEL_SOURCE]
#   BUILD_DIR: a CMake build of this repository (for libstepserve_quant.a / libstepserve_base.a;
#   default build); KERNEL_SOURCE: a mutated copy of paged_attention_cuda.cu.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
work=${EMU_WORK:-$(mktemp -d)}
cuda_include=${CUDA_INCLUDE:-/usr/local/cuda/include}
emu=$root/tests/cuda_emu/prefill_attention
python3 "$root/tests/cuda_emu/paged_attention/transform.py" "$work/attention" ${2:+"$2"}
python3 "$root/tests/cuda_emu/rope_append/transform.py" "$work/rope"
flags=(-std=c++20 -O1 -w -I "$cuda_include" -I "$root" -I "$emu" -I "$root/tests/cuda_emu/paged_attention")
g++ "${flags[@]}" -I "$work/rope" -c "$here/rope_tu.cc" -o "$work/rope_tu.o"
libs=$(pkg-config --libs absl_status absl_statusor absl_str_format absl_strings)
# shellcheck disable=SC2086  # $libs is several linker words
g++ "${flags[@]}" -I "$work/attention" "$here/emu_test.cc" "$work/rope_tu.o" "$emu/emu_cuda.cc" \
  "$root/kernels/attention/paged_attention_ref.cc" \
  "$root/kernels/attention/paged_attention_cuda_plan.cc" "$build/engine/quant/libstepserve_quant.a" \
  "$build/engine/base/libstepserve_base.a" $libs -o "$work/emu_test"
# The default compact level (2: the 4-head kernel for CTAs of 4 heads or fewer, the 8-head one up
# to 8), then level 1 and level 0 (the 16-head kernel only).
"$work/emu_test"
STEPSERVE_ATTN_COMPACT_HEADS=1 "$work/emu_test"
STEPSERVE_ATTN_COMPACT_HEADS=0 "$work/emu_test"
