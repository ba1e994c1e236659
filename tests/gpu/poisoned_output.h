// A kernel launch into a NaN-poisoned output, shared by the GPU kernel tests: every output must be
// written and nothing past a row's `out` values touched.
#ifndef STEPSERVE_TESTS_GPU_POISONED_OUTPUT_H_
#define STEPSERVE_TESTS_GPU_POISONED_OUTPUT_H_

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/kernel_status.h"

namespace stepserve::kernels::testing {

// Fills y (rows x y_stride floats on the device) with 0xFF bytes (NaN), runs `launch` (returns a
// KernelStatus), waits, and returns the rows x out values in `result` (as T); fails the test if a
// value inside `out` is not finite (unwritten) or one past it changed. `what` names the kernel in
// a launch error.
template <class Launch, class T>
void RunPoisonedRows(const char* what, Launch launch, void* dy, int64_t rows, int64_t out,
                     int64_t y_stride, std::vector<T>* result) {
  ASSERT_EQ(cudaMemset(dy, 0xFF, rows * y_stride * 4), cudaSuccess);
  ASSERT_EQ(launch(), KernelStatus::kOk);
  const cudaError_t err = cudaDeviceSynchronize();
  ASSERT_EQ(err, cudaSuccess) << CudaErrorText(what, err);
  std::vector<float> raw(rows * y_stride);
  ASSERT_EQ(cudaMemcpy(raw.data(), dy, raw.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  result->assign(rows * out, T{0});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < y_stride; ++o) {
      const float v = raw[r * y_stride + o];
      if (o < out) {
        ASSERT_TRUE(std::isfinite(v)) << "y[" << r << "][" << o << "] not written";
        (*result)[r * out + o] = static_cast<T>(v);
      } else {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        ASSERT_EQ(bits, 0xFFFFFFFFu) << "write past out in row " << r;
      }
    }
  }
}

}  // namespace stepserve::kernels::testing

#endif  // STEPSERVE_TESTS_GPU_POISONED_OUTPUT_H_
