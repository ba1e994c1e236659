// Raising a kernel's dynamic shared-memory limit above the 48 KB default, once per device: the
// attribute is not a stream operation, so it is also safe while a CUDA graph is being captured,
// and setting it on every launch would put a driver call on the decode path.
#ifndef STEPSERVE_KERNELS_COMMON_DYNAMIC_SMEM_H_
#define STEPSERVE_KERNELS_COMMON_DYNAMIC_SMEM_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

namespace stepserve::kernels {

// `done` is the kernel's own record of the devices it was set on (a function-local static per
// kernel); devices past 63 are set every time.
template <class Kernel>
cudaError_t SetDynamicSharedOnce(Kernel* kernel, size_t bytes, std::atomic<uint64_t>& done) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return cudaSuccess;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(bytes));
  if (err == cudaSuccess) done.fetch_or(bit, std::memory_order_release);
  return err;
}

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_COMMON_DYNAMIC_SMEM_H_
