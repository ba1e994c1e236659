// The programmatic-launch side of the emulated kernels, inline only (any translation unit may
// include it): the wait and trigger as no-ops (CTAs run one after another, each launch after the
// one before it) and LaunchWithPdl running the grid under the emulator after the test's own shape
// check (emu::CheckLaunch, which each test defines once). emu_launch.h adds the runtime stubs that
// a test's one unit defines. Verification harness only.
#pragma once

#include "emu_cuda.h"

namespace emu {
// Fails (emu::Fail) on a launch the test's emulation does not cover.
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
