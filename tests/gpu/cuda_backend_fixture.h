// A gtest fixture for the CUDA backend tests that need the concrete CudaBackend (its switches and
// counters): the backend or a skip without a device, a random seed printed for reruns, and
// weights placed on it (random GGUF blocks, or an F32 vector such as a norm's) that live as long
// as the test.
#ifndef STEPSERVE_TESTS_GPU_CUDA_BACKEND_FIXTURE_H_
#define STEPSERVE_TESTS_GPU_CUDA_BACKEND_FIXTURE_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "gtest/gtest.h"
#include "tests/gpu/backend_test_util.h"
#include "tests/gpu/weight_test_util.h"

namespace stepserve::gpu_testing {

class CudaBackendFixture : public testing::Test {
 protected:
  void SetUp() override {
    backend_ = CudaBackendOrNull();
    // The standard skip of every GPU test on a machine without a device (CI): nothing to run.
    if (!backend_) GTEST_SKIP() << kNoDeviceMessage;
    cuda_ = dynamic_cast<CudaBackend*>(backend_.get());
    ASSERT_NE(cuda_, nullptr);
    seed_ = std::random_device{}();
    std::printf("seed %u\n", seed_);
  }

  // RandomHostWeight (ne = [in, out, experts]) placed on the backend; a failure fails the test.
  WeightView Place(GgmlType type, int64_t in, int64_t out, int64_t experts, uint64_t seed,
                   float rms) {
    const HostWeight host = RandomHostWeight(type, in, out, experts, seed, rms);
    absl::StatusOr<WeightView> placed = backend_->PlaceWeight(host.view, "w");
    EXPECT_TRUE(placed.ok()) << placed.status();
    return placed.ok() ? *placed : WeightView{};
  }

  // An F32 weight of `values` (ne[0] = values.size(): a norm's) in backend memory.
  WeightView F32Weight(const std::vector<float>& values) {
    buffers_.push_back(UploadBytes(*backend_, values.data(), values.size() * sizeof(float)));
    WeightView w;
    w.data = buffers_.back().data();
    w.type = GgmlType::kF32;
    w.ne[0] = static_cast<int64_t>(values.size());
    return w;
  }

  std::unique_ptr<Backend> backend_;
  CudaBackend* cuda_ = nullptr;
  unsigned seed_ = 0;

 private:
  std::vector<BackendBuffer> buffers_;
};

}  // namespace stepserve::gpu_testing

#endif  // STEPSERVE_TESTS_GPU_CUDA_BACKEND_FIXTURE_H_
