// Small host-side CUDA helpers shared by the CUDA kernels, their tests and benchmarks. Kernels
// return KernelStatus and never abort (architecture.md section 4); these helpers turn CUDA
// runtime errors into readable text for the callers that report them.
#ifndef STEPSERVE_KERNELS_COMMON_CUDA_CHECK_H_
#define STEPSERVE_KERNELS_COMMON_CUDA_CHECK_H_

#include <cuda_runtime_api.h>

#include <string>

namespace stepserve::kernels {

// "cudaMalloc(w): out of memory (cudaErrorMemoryAllocation)".
inline std::string CudaErrorText(const char* what, cudaError_t err) {
  return std::string(what) + ": " + cudaGetErrorString(err) + " (" + cudaGetErrorName(err) + ")";
}

// Number of visible CUDA devices, 0 when there is no driver or no device (never an error: a
// machine without a GPU is a normal configuration for the CPU build, CI and tests).
inline int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error for later calls
    return 0;
  }
  return count;
}

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_COMMON_CUDA_CHECK_H_
