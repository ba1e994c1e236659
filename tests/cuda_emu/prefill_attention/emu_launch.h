// The launch side of the emulated kernels, for a test's one translation unit (the attention
// emulations and rope_append's): the programmatic-launch wait and trigger as no-ops (CTAs run one
// after another, each launch after the one before it), LaunchWithPdl running the grid under the
// emulator after the test's own shape check (emu::CheckLaunch, which each test defines), and the
// runtime calls the kernels' host code makes. Verification harness only.
#pragma once

#include "emu_cuda.h"

cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
template <class T>
cudaError_t cudaFuncSetAttribute(T*, cudaFuncAttribute, int) {
  return cudaSuccess;
}

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
