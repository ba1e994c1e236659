// The CUDA backend's RouterLogitsTopK with the fused router kernel (STEPSERVE_ROUTER_FUSED=1,
// kernels::RouterGemvTopKCuda: the F32 router GEMV and the top-k selection in one launch) against
// the CPU backend's Matmul + RouterTopK. Bounds:
//  - logits: relative error (Frobenius) <= 1e-5 against the CPU matmul (F32 sums of 516-8192
//    products in another order);
//  - ids and weights: the CPU RouterTopK applied to the kernel's own downloaded logits gives the
//    same ids, except where two experts' scores tie to within 1e-6 (device expf against the
//    host's), and weights within 1e-5;
//  - a second launch on poisoned outputs gives the same bits (the arrival counter came back to 0).
// Shapes: the Step-3.5 router (288 x 4096, 1-4 rows, padded rows), K past the kernel's early loads
// (8192), odd expert counts, softmax gating; 5 rows and K % 4 != 0 take the two-kernel fallback.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/backend.h"
#include "tests/gpu/backend_test_util.h"

namespace stepserve {
namespace {

using gpu_testing::CudaBackendOrNull;
using gpu_testing::kNoDeviceMessage;
using gpu_testing::UploadBytes;

constexpr double kLogitBound = 1e-5;
constexpr double kWeightBound = 1e-5;
constexpr double kTieScore = 1e-6;

double RelError(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = double{got[i]} - double{want[i]};
    num += d * d;
    den += double{want[i]} * double{want[i]};
  }
  return std::isnan(num) ? INFINITY : std::sqrt(num / (den > 0.0 ? den : 1.0));
}

struct Case {
  int64_t in, experts, rows, x_pad, top_k;
  GatingFunc gating;
  bool bias, normalize;
  float scale;
};

class RouterLogitsCudaTest : public ::testing::Test {
 protected:
  // The switch is read once per process, at the first RouterLogitsTopK: set before any runs.
  static void SetUpTestSuite() { setenv("STEPSERVE_ROUTER_FUSED", "1", 1); }

  void SetUp() override {
    cuda_ = CudaBackendOrNull();
    if (!cuda_) GTEST_SKIP() << kNoDeviceMessage;
    absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateBackend("cpu", {.num_threads = 4});
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = *std::move(cpu);
    const unsigned seed = std::random_device{}();
    rng_.seed(seed);
    RecordProperty("seed", static_cast<int>(seed));
    std::printf("seed %u\n", seed);
  }

  std::vector<float> Random(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng_);
    return v;
  }

  void Run(const Case& c);

  std::unique_ptr<Backend> cuda_;
  std::unique_ptr<Backend> cpu_;
  std::mt19937 rng_;
};

void RouterLogitsCudaTest::Run(const Case& c) {
  SCOPED_TRACE(absl::StrFormat("in %d experts %d rows %d pad %d top_k %d gating %d", c.in,
                               c.experts, c.rows, c.x_pad, c.top_k, static_cast<int>(c.gating)));
  const int64_t x_stride = c.in + c.x_pad;
  std::vector<float> x = Random(static_cast<size_t>(x_stride * c.rows), -1.0f, 1.0f);
  // Router-like logits of a few units: weights ~ 3 / sqrt(in).
  const float w_scale = 3.0f / std::sqrt(static_cast<float>(c.in));
  std::vector<float> w = Random(static_cast<size_t>(c.in * c.experts), -w_scale, w_scale);
  std::vector<float> bias = Random(static_cast<size_t>(c.experts), -0.05f, 0.05f);
  RouterParams p;
  p.top_k = c.top_k;
  p.gating = c.gating;
  p.normalize = c.normalize;
  p.scale = c.scale;

  // CPU: Matmul, then RouterTopK.
  WeightView hw;
  hw.data = w.data();
  hw.type = GgmlType::kF32;
  hw.ne[0] = c.in;
  hw.ne[1] = c.experts;
  const TensorView hx = TensorView::F32(x.data(), c.in, c.rows, x_stride);
  std::vector<float> want_logits(static_cast<size_t>(c.experts * c.rows));
  ASSERT_TRUE(cpu_->Matmul(hx, hw, TensorView::F32(want_logits.data(), c.experts, c.rows)).ok());

  // CUDA: the fused op on poisoned outputs, twice.
  BackendBuffer dx = UploadBytes(*cuda_, x.data(), x.size() * 4);
  BackendBuffer dw = UploadBytes(*cuda_, w.data(), w.size() * 4);
  BackendBuffer dbias = UploadBytes(*cuda_, bias.data(), bias.size() * 4);
  if (c.bias) p.bias = {static_cast<const float*>(dbias.data()), bias.size()};
  WeightView dwv = hw;
  dwv.data = dw.data();
  const size_t n = static_cast<size_t>(c.rows * c.top_k);
  const std::vector<float> nan_logits(static_cast<size_t>(c.experts * c.rows),
                                      std::numeric_limits<float>::quiet_NaN());
  const std::vector<int32_t> bad_ids(n, -7);
  const std::vector<float> nan_weights(n, std::numeric_limits<float>::quiet_NaN());
  BackendBuffer dlogits = UploadBytes(*cuda_, nan_logits.data(), nan_logits.size() * 4);
  BackendBuffer dids = UploadBytes(*cuda_, bad_ids.data(), n * 4);
  BackendBuffer dweights = UploadBytes(*cuda_, nan_weights.data(), n * 4);
  std::vector<float> got_logits[2];
  std::vector<int32_t> got_ids[2];
  std::vector<float> got_weights[2];
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(cuda_->Upload(nan_logits.data(), dlogits.data(), nan_logits.size() * 4).ok());
    ASSERT_TRUE(cuda_->Upload(bad_ids.data(), dids.data(), n * 4).ok());
    ASSERT_TRUE(cuda_->Upload(nan_weights.data(), dweights.data(), n * 4).ok());
    const absl::Status status = cuda_->RouterLogitsTopK(
        TensorView::F32(static_cast<float*>(dx.data()), c.in, c.rows, x_stride), dwv,
        TensorView::F32(dlogits.f32(), c.experts, c.rows), p,
        {static_cast<int32_t*>(dids.data()), n}, {static_cast<float*>(dweights.data()), n});
    ASSERT_TRUE(status.ok()) << status;
    got_logits[round].resize(nan_logits.size());
    got_ids[round].resize(n);
    got_weights[round].resize(n);
    ASSERT_TRUE(
        cuda_->Download(dlogits.data(), got_logits[round].data(), nan_logits.size() * 4).ok());
    ASSERT_TRUE(cuda_->Download(dids.data(), got_ids[round].data(), n * 4).ok());
    ASSERT_TRUE(cuda_->Download(dweights.data(), got_weights[round].data(), n * 4).ok());
  }
  EXPECT_LE(RelError(got_logits[0], want_logits), kLogitBound);
  EXPECT_EQ(got_logits[0], got_logits[1]);
  EXPECT_EQ(got_ids[0], got_ids[1]) << "second launch (the counter must be back at zero)";
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(std::memcmp(&got_weights[0][i], &got_weights[1][i], 4), 0) << i;
  }

  // The selection against the CPU's on the kernel's own logits.
  if (c.bias) p.bias = bias;
  std::vector<int32_t> want_ids(n, -1);
  std::vector<float> want_weights(n, std::numeric_limits<float>::quiet_NaN());
  ASSERT_TRUE(cpu_->RouterTopK(TensorView::F32(got_logits[0].data(), c.experts, c.rows), p,
                               want_ids, want_weights)
                  .ok());
  int64_t mismatched = 0, near_ties = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t k = 0; k < c.top_k; ++k) {
      const size_t i = static_cast<size_t>(r * c.top_k + k);
      const int32_t got = got_ids[0][i], want = want_ids[i];
      if (got == want) continue;
      const auto score = [&](int32_t e) {
        const double logit = got_logits[0][static_cast<size_t>(r * c.experts + e)];
        return 1.0 / (1.0 + std::exp(-logit)) + (c.bias ? double{bias[e]} : 0.0);
      };
      if (c.gating == GatingFunc::kSigmoid && got >= 0 && got < c.experts &&
          std::fabs(score(got) - score(want)) < kTieScore) {
        ++near_ties;
      } else {
        ++mismatched;
      }
    }
  }
  EXPECT_EQ(mismatched, 0) << "ids differ beyond ties (" << near_ties << " near-ties)";
  if (near_ties == 0) EXPECT_LE(RelError(got_weights[0], want_weights), kWeightBound);
}

TEST_F(RouterLogitsCudaTest, MatchesCpuMatmulAndSelection) {
  using G = GatingFunc;
  const Case cases[] = {
      {4096, 288, 1, 0, 8, G::kSigmoid, true, true, 3.0f},  // Step-3.5 decode
      {4096, 288, 4, 8, 8, G::kSigmoid, true, true, 3.0f},  // 4 streams, padded rows
      {4096, 288, 3, 0, 8, G::kSigmoid, false, false, 1.0f},
      {8192, 100, 2, 4, 6, G::kSigmoid, true, true, 2.5f},  // K past the early loads
      {516, 37, 3, 0, 5, G::kSoftmax, true, true, 1.0f},    // odd experts, short K
      {4096, 352, 1, 0, 8, G::kSigmoid, true, true, 3.0f},  // Step-5's expert count
      {4096, 288, 5, 0, 8, G::kSigmoid, true, true, 3.0f},  // 5 rows: the two kernels
      {1001, 64, 2, 3, 4, G::kSoftmax, false, true, 1.0f},  // K % 4: the two kernels
  };
  for (const Case& c : cases) Run(c);
}

}  // namespace
}  // namespace stepserve
