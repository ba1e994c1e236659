// Programmatic dependent launch (sm_90): lets a kernel that is launched with
// cudaLaunchAttributeProgrammaticStreamSerialization start (and run its prologue: for the streamed
// GEMV, the weight copies) while the kernel before it in the stream is still running.
//  - The earlier kernel calls AllowDependentLaunch() once it no longer needs to hold the next
//    one back; calling it at the very start is safe because...
//  - ...the dependent calls WaitForPrimaryGrid() before it reads anything the earlier kernel
//    writes (or writes anything that kernel reads); that returns once the earlier grid has
//    completed and its memory is visible.
// Both are no-ops for a kernel launched without the attribute or without a PDL-launched
// dependent, so a kernel may call them whoever launches it.
//
// Every kernel of the decode path waits first and then allows its dependent, and is launched with
// LaunchWithPdl: a kernel's launch and CTA set-up overlap the one before it instead of following
// its completion (~1 us a kernel, ~40 kernels a layer at batch 1). Waiting before anything else
// keeps plain stream-order semantics: a grid completes only after the one before it completed,
// so every earlier grid's writes are visible once WaitForPrimaryGrid returns. The only reads
// allowed before it are of data no kernel writes (weights) and - one documented exception - data
// written two launches back when the kernel in between waits before it allows its dependent:
// then that writer completed before this grid could launch (the MoE down + combine kernel reads
// the router's expert ids this way; ExpertGateUpKernel must keep its wait first). STEPSERVE_PDL=0
// in the environment launches everything in plain stream order (for A/B runs).
#ifndef STEPSERVE_KERNELS_COMMON_PDL_CUH_
#define STEPSERVE_KERNELS_COMMON_PDL_CUH_

#include <cuda_runtime.h>

#include <utility>

#include "kernels/common/env_switch.h"

namespace stepserve::kernels {

__device__ __forceinline__ void AllowDependentLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

__device__ __forceinline__ void WaitForPrimaryGrid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Whether launches use programmatic stream serialization (STEPSERVE_PDL, read once).
inline bool PdlEnabled() {
  static const bool on = EnvSwitchOn("STEPSERVE_PDL");
  return on;
}

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream serialization when
// `overlap`. The kernel must call WaitForPrimaryGrid() before touching memory other kernels write.
template <class... KernelArgs, class... Args>
cudaError_t LaunchOverlapping(bool overlap, void (*kernel)(KernelArgs...), dim3 grid, dim3 block,
                              size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = overlap ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// LaunchOverlapping when PdlEnabled().
template <class... KernelArgs, class... Args>
cudaError_t LaunchWithPdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, Args&&... args) {
  return LaunchOverlapping(PdlEnabled(), kernel, grid, block, smem, stream,
                           std::forward<Args>(args)...);
}

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_COMMON_PDL_CUH_
