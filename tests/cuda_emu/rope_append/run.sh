#!/usr/bin/env bash
# Host emulation of the fused q/k norm + RoPE + KV append (kernels/attention/kv_append_rope_cuda.cu)
# against the two kernels it replaces (QkNormRopeCuda, KvAppendCuda), all three from their real
# sources under ../prefill_attention's emulator (256 threads as coroutines in shuffled orders, warp
# collectives and barriers once every participant has arrived): q, k and the F32 / F16 / Q8_0
# caches must be equal bit for bit. No GPU needed (CUDA headers only). Checks the head and byte
# mappings before device time is spent; not the hardware, not speed.
# Usage: bash tests/cuda_emu/rope_append/run.sh [BUILD_DIR] [FUSED_KERNEL_SOURCE]
#   BUILD_DIR: a CMake build of this repository (for libstepserve_quant.a / libstepserve_base.a;
#   default build); FUSED_KERNEL_SOURCE: a mutated copy of the kernel, to check a bug is caught.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
work=${EMU_WORK:-$(mktemp -d)}
cuda_include=${CUDA_INCLUDE:-/usr/local/cuda/include}
python3 "$here/transform.py" "$work" ${2:+"$2"}
libs=$(pkg-config --libs absl_status absl_statusor absl_str_format absl_strings)
g++ -std=c++20 -O1 -w -I "$cuda_include" -I "$root" -I "$here/../prefill_attention" -I "$work" \
  "$here/emu_test.cc" "$here/../prefill_attention/emu_cuda.cc" \
  "$root/kernels/attention/paged_attention_ref.cc" "$root/kernels/attention/paged_attention_cuda_plan.cc" \
  "$build/engine/quant/libstepserve_quant.a" "$build/engine/base/libstepserve_base.a" $libs \
  -o "$work/emu_test"
"$work/emu_test"
