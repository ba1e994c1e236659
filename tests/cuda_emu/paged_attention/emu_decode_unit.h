// What a decode-attention emulation's translation unit needs before it includes the transformed
// kernel source (kernel_emu.inc): the emulator and its launch side, static shared arrays, the
// CUDA intrinsics the kernels call beyond emu_cuda.h's, and the shared-memory limit and launch
// check main() works with (paged_attention/emu_test.cc; kept apart so another decode-attention
// emulation can share it). Include from a test's one unit (it defines emu::CheckLaunch).
// Verification harness only.
#pragma once

#include <cmath>

#include "emu_cuda.h"
#include "emu_launch.h"
#include "emu_rounding.h"
// Static shared arrays: one instance for all the coroutine threads of a CTA (CTAs run one at a
// time), as on the device.
#undef __shared__
#define __shared__ static
#include "kernels/attention/paged_attention_cuda.h"

template <class T>
inline T __ldcg(const T* p) {
  return *p;
}
// The head gate's int8 rows (q8_quantize.cuh) are not emulated: these only make it compile, and
// the cases leave q8_natural null.
inline unsigned __shfl_down_sync(unsigned, unsigned v, unsigned, int) {
  emu::Fail("__shfl_down_sync (the gate's int8 rows) is not emulated");
  return v;
}
inline int __float2int_rn(float x) { return static_cast<int>(std::nearbyint(x)); }
inline unsigned __byte_perm(unsigned, unsigned, unsigned) {
  emu::Fail("__byte_perm (the gate's int8 rows) is not emulated");
  return 0;
}
constexpr size_t kEmuSmemBytes = 200000;  // the dynamic shared memory main() gives the emulator
// Up to emu::kMaxThreads threads in whole warps (the attention kernels' 128, the rope-and-append
// kernel's 256) and at most kEmuSmemBytes of dynamic shared memory.
void emu::CheckLaunch(dim3, dim3 block, size_t smem) {
  if (block.x > emu::kMaxThreads || block.x % 32 != 0 || smem > kEmuSmemBytes) {
    emu::Fail("launch shape");
  }
}
