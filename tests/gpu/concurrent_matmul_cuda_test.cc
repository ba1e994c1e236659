// CudaBackend::ConcurrentMatmuls with its side stream on (set_concurrent_matmuls): the jobs' GEMVs
// are the Matmuls' kernels on the same int8 activations, so every output must be bitwise what the
// Matmuls in order give - with activations quantized by the GEMVs (job 0 in the Matmul scratch,
// the side jobs in their own) and prequantized by a norm (the fused quantization), mixed types
// (IQ4_XS's pair order beside Q5_K's and Q8_0's natural order: attn_v beside q/k/gate), 1-16 rows,
// and past the GEMVs (17 rows), where it falls back to the Matmuls. Outputs are poisoned first;
// a step-graph recording of the fork and join is covered by the model tests run with
// STEPSERVE_CONCURRENT_MATMULS=1 (bench/gpu/calls/session31-h200.sh).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "gtest/gtest.h"
#include "tests/gpu/backend_test_util.h"
#include "tests/gpu/weight_test_util.h"

namespace stepserve {
namespace {

using gpu_testing::CudaBackendOrNull;
using gpu_testing::DeviceMat;
using gpu_testing::DownloadMat;
using gpu_testing::kNoDeviceMessage;
using gpu_testing::PoisonedMat;
using gpu_testing::RandomHostWeight;
using gpu_testing::RandomNormal;
using gpu_testing::UploadBytes;
using gpu_testing::UploadMat;

constexpr int64_t kEmbd = 2048;  // > 1024: the block norm kernel that fuses the quantization

struct Job {
  GgmlType type;
  int64_t out;
};
// q/k/gate fused (IQ4_XS), attn_v (Q5_K), one more natural-order type; odd output counts.
constexpr Job kJobs[] = {{GgmlType::kIQ4_XS, 1031}, {GgmlType::kQ5_K, 257}, {GgmlType::kQ8_0, 129}};

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ConcurrentMatmulsCudaTest, SideStreamIsBitwiseTheMatmulsInOrder) {
  std::unique_ptr<Backend> backend = CudaBackendOrNull();
  if (!backend) GTEST_SKIP() << kNoDeviceMessage;
  auto* cuda = dynamic_cast<CudaBackend*>(backend.get());
  ASSERT_NE(cuda, nullptr);
  const unsigned seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937_64 rng(seed);
  std::vector<WeightView> weights;
  for (const Job& job : kJobs) {
    gpu_testing::HostWeight host =
        RandomHostWeight(job.type, kEmbd, job.out, 1, seed + weights.size(), 0.05f);
    absl::StatusOr<WeightView> placed = backend->PlaceWeight(host.view, "w");
    ASSERT_TRUE(placed.ok()) << placed.status();
    weights.push_back(*placed);
  }
  BackendBuffer norm_buffer;
  const std::vector<float> norm_values = RandomNormal(kEmbd, rng, 0.5f);
  norm_buffer = UploadBytes(*backend, norm_values.data(), norm_values.size() * 4);
  WeightView norm_w;
  norm_w.data = norm_buffer.data();
  norm_w.type = GgmlType::kF32;
  norm_w.ne[0] = kEmbd;

  for (const int64_t rows : {int64_t{1}, int64_t{3}, int64_t{16}, int64_t{17}}) {
    for (const bool after_norm : {false, true}) {
      for (const size_t n_jobs : {size_t{2}, size_t{3}}) {
        SCOPED_TRACE("rows " + std::to_string(rows) + (after_norm ? " after a norm" : " plain") +
                     " jobs " + std::to_string(n_jobs));
        const std::vector<float> x0 = RandomNormal(static_cast<size_t>(kEmbd * rows), rng);
        std::vector<float> results[2][3];
        uint64_t prequantized[2] = {0, 0};
        for (const bool concurrent : {false, true}) {
          cuda->set_concurrent_matmuls(concurrent);
          DeviceMat x = UploadMat(*backend, x0, kEmbd, rows);
          DeviceMat a = PoisonedMat(*backend, kEmbd, rows);
          const TensorView input = after_norm ? a.view : x.view;
          if (after_norm) {
            ASSERT_TRUE(backend->RmsNorm(x.view, norm_w, 1e-5f, a.view).ok());
          }
          std::vector<DeviceMat> ys;
          std::vector<MatmulJob> jobs;
          for (size_t i = 0; i < n_jobs; ++i)
            ys.push_back(PoisonedMat(*backend, kJobs[i].out, rows));
          for (size_t i = 0; i < n_jobs; ++i) jobs.push_back({input, weights[i], ys[i].view});
          const uint64_t uses = cuda->prequantized_uses();
          if (concurrent) {
            const absl::Status s = backend->ConcurrentMatmuls(jobs);
            ASSERT_TRUE(s.ok()) << s;
          } else {
            for (const MatmulJob& job : jobs)
              ASSERT_TRUE(backend->Matmul(job.x, job.w, job.y).ok());
          }
          prequantized[concurrent] = cuda->prequantized_uses() - uses;
          for (size_t i = 0; i < n_jobs; ++i) results[concurrent][i] = DownloadMat(*backend, ys[i]);
        }
        cuda->set_concurrent_matmuls(false);
        EXPECT_EQ(prequantized[0], prequantized[1]);
        if (after_norm && rows <= 16) {
          EXPECT_GT(prequantized[1], 0u);  // the fused path ran
        }
        for (size_t i = 0; i < n_jobs; ++i) {
          SCOPED_TRACE(GgmlTypeName(kJobs[i].type));
          for (const float v : results[1][i]) ASSERT_FALSE(std::isnan(v)) << "an output unwritten";
          EXPECT_TRUE(BitwiseEqual(results[0][i], results[1][i]));
        }
      }
    }
  }
}

}  // namespace
}  // namespace stepserve
