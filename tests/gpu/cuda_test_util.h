// Helpers shared by the GPU kernel tests: whether a device is visible, an owning device allocation,
// a host-to-device copy, and the 16-byte row padding the int8 GEMVs require (matmul_cuda.h).
#ifndef STEPSERVE_TESTS_GPU_CUDA_TEST_UTIL_H_
#define STEPSERVE_TESTS_GPU_CUDA_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "engine/quant/ggml_type.h"
#include "kernels/common/cuda_check.h"

namespace stepserve::kernels::testing {

// Device memory freed on scope exit; ptr is null when the allocation failed.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&ptr, bytes) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

inline bool HaveCudaDevice() { return CudaDeviceCount() > 0; }

// A blocking host-to-device copy; false when it failed.
inline bool CopyToDevice(void* dst, const void* src, size_t bytes) {
  return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
}

// Bytes of one `in`-element row of `type`, padded to 16 as the backend uploads it.
inline int64_t PaddedRowBytes(GgmlType type, int64_t in) {
  return (RowBytes(type, in) + 15) / 16 * 16;
}

}  // namespace stepserve::kernels::testing

#endif  // STEPSERVE_TESTS_GPU_CUDA_TEST_UTIL_H_
