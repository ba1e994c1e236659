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
#ifndef STEPSERVE_KERNELS_COMMON_PDL_CUH_
#define STEPSERVE_KERNELS_COMMON_PDL_CUH_

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

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_COMMON_PDL_CUH_
