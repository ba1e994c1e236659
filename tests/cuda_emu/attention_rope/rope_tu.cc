// The q/k norm + RoPE and KV append sources (QkNormRopeAppendCuda and the kernels it validates
// with) in a translation unit of their own, so their file-local names cannot collide with the
// attention kernel's in emu_test.cc. The launch side repeats emu_launch.h's inline pieces only: its
// runtime stubs are defined once, in emu_test.cc's unit. Verification harness only.
#include "emu_cuda.h"

namespace emu {
void CheckLaunch(dim3 grid, dim3 block, size_t smem);
}  // namespace emu

namespace stepserve::kernels {
inline void WaitForPrimaryGrid() {}
inline void AllowDependentLaunch() {}
template <class... KA, class... A>
cudaError_t LaunchWithPdl(void (*kernel)(KA...), dim3 grid, dim3 block, size_t smem, cudaStream_t,
                          A&&... args) {
  emu::CheckLaunch(grid, block, smem);
  emu::RunGrid(grid, block, smem, [&] { kernel(args...); });
  return cudaSuccess;
}
}  // namespace stepserve::kernels

// Static shared arrays: one instance for all the coroutine threads of a CTA (CTAs run one at a
// time), as on the device.
#undef __shared__
#define __shared__ static
#include "kernels/attention/kv_append_rope_cuda.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/attention/paged_attention_cuda.h"
#include "kernels/rope/rope_cuda.h"

inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }

#include "kernel_emu.inc"
