// Helpers for the GPU backend tests: the CUDA backend or a skip, host <-> backend copies of
// activation matrices (poisoned with NaN before an op writes them), and the CPU backend as the
// reference every CUDA op is compared with.
//
//   std::unique_ptr<Backend> cuda = CudaBackendOrNull();
//   if (!cuda) GTEST_SKIP() << kNoDeviceMessage;
//   DeviceMat x = UploadMat(*cuda, host_x, cols, rows);
//   DeviceMat y = PoisonedMat(*cuda, out_cols, rows);
//   ASSERT_TRUE(cuda->Matmul(x.view, placed_w, y.view).ok());
//   std::vector<float> got = DownloadMat(*cuda, y);
#ifndef STEPSERVE_TESTS_GPU_BACKEND_TEST_UTIL_H_
#define STEPSERVE_TESTS_GPU_BACKEND_TEST_UTIL_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/base/check.h"
#include "kernels/common/cuda_check.h"

namespace stepserve::gpu_testing {

inline constexpr const char* kNoDeviceMessage = "no CUDA device visible; GPU test skipped";

// The CUDA backend on device 0, or null when no device is visible. `exact_activations`: see
// BackendOptions (tests with float-rounding bounds want it; the fast int8 paths have their own).
inline std::unique_ptr<Backend> CudaBackendOrNull(bool exact_activations = false) {
  if (kernels::CudaDeviceCount() == 0) return nullptr;
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      CreateBackend("cuda", {.device = 0, .exact_activations = exact_activations});
  STEPSERVE_CHECK(backend.ok());
  return *std::move(backend);
}

// An F32 matrix in backend memory and its view.
struct DeviceMat {
  BackendBuffer buffer;
  TensorView view;
};

inline DeviceMat AllocMat(Backend& backend, int64_t cols, int64_t rows) {
  DeviceMat mat;
  absl::StatusOr<BackendBuffer> buffer =
      backend.Allocate(static_cast<size_t>(cols * rows) * sizeof(float));
  STEPSERVE_CHECK(buffer.ok());
  mat.buffer = *std::move(buffer);
  mat.view = TensorView::F32(mat.buffer.f32(), cols, rows);
  return mat;
}

inline DeviceMat UploadMat(Backend& backend, const std::vector<float>& host, int64_t cols,
                           int64_t rows) {
  STEPSERVE_CHECK(static_cast<int64_t>(host.size()) == cols * rows);
  DeviceMat mat = AllocMat(backend, cols, rows);
  STEPSERVE_CHECK(backend.Upload(host.data(), mat.buffer.data(), host.size() * 4).ok());
  return mat;
}

// Filled with NaN so an element the op forgets to write fails the comparison.
inline DeviceMat PoisonedMat(Backend& backend, int64_t cols, int64_t rows) {
  return UploadMat(backend,
                   std::vector<float>(static_cast<size_t>(cols * rows),
                                      std::numeric_limits<float>::quiet_NaN()),
                   cols, rows);
}

inline std::vector<float> DownloadMat(Backend& backend, const DeviceMat& mat) {
  std::vector<float> host(static_cast<size_t>(mat.view.cols() * mat.view.rows()));
  STEPSERVE_CHECK(backend.Download(mat.buffer.data(), host.data(), host.size() * 4).ok());
  return host;
}

// Any backend memory of `bytes` holding `host` (ids, weights of RouterTopK/MoeExperts, ...).
inline BackendBuffer UploadBytes(Backend& backend, const void* host, size_t bytes) {
  absl::StatusOr<BackendBuffer> buffer = backend.Allocate(bytes);
  STEPSERVE_CHECK(buffer.ok());
  STEPSERVE_CHECK(backend.Upload(host, buffer->data(), bytes).ok());
  return *std::move(buffer);
}

}  // namespace stepserve::gpu_testing

#endif  // STEPSERVE_TESTS_GPU_BACKEND_TEST_UTIL_H_
