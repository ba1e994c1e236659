// The fused decode router (RouterFusedCuda through CudaBackend::Route) against the CPU backend's
// Route (Matmul + RouterTopK) on fresh random data. Outputs start poisoned (logits NaN, ids -7,
// weights NaN). Bounds:
//  - logits: ||cuda - cpu|| / ||cpu|| <= 1e-5 (F32 dot products of 1028-8192 terms summed in
//    another order; ~1e-7 expected);
//  - ids equal, except where the two experts' CPU scores (double, from the CPU logits) differ by
//    less than 1e-5 - a near-tie the summation order may flip; exact ties (duplicated router
//    rows: bit-identical logits on both sides) must go to the lower id;
//  - weights: ||cuda - cpu|| / ||cpu|| <= 1e-5 when no near-tie changed the picks.
// Cases cover the Step shapes (288 experts x 4096, top 8; 352 x 6144), odd sizes (1028 inputs,
// 37 experts), 512 experts, both gatings, bias / normalize / scale, rows 1-4 (fused) and 5 or
// 16 (the unfused path), padded activation rows, and back-to-back launches of different
// expert counts (the ticket counter must come back to zero after each).
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/backend.h"
#include "gtest/gtest.h"
#include "kernels/moe/router_cuda.h"
#include "tests/gpu/backend_test_util.h"

namespace stepserve {
namespace {

using gpu_testing::CudaBackendOrNull;
using gpu_testing::kNoDeviceMessage;
using gpu_testing::UploadBytes;

constexpr double kLogitBound = 1e-5;
constexpr double kWeightBound = 1e-5;
constexpr double kNearTie = 1e-5;

struct Case {
  int64_t in, experts, top_k, rows, x_pad;
  GatingFunc gating;
  bool bias, normalize;
  float scale;
  bool duplicate_rows;  // router rows repeated in pairs: exact ties
};

double RelError(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    diff += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    norm += double{want[i]} * want[i];
  }
  return std::sqrt(diff / (norm > 0.0 ? norm : 1.0));
}

// Double-precision selection score of expert e in row r from the CPU's logits.
double Score(const std::vector<float>& logits, int64_t experts, int64_t r, int64_t e, const Case& c,
             const std::vector<float>& bias) {
  const float* row = logits.data() + r * experts;
  double pi = 0.0;
  if (c.gating == GatingFunc::kSigmoid) {
    pi = 1.0 / (1.0 + std::exp(-double{row[e]}));
  } else {
    double max = -INFINITY, sum = 0.0;
    for (int64_t i = 0; i < experts; ++i) max = std::max(max, double{row[i]});
    for (int64_t i = 0; i < experts; ++i) sum += std::exp(row[i] - max);
    pi = std::exp(row[e] - max) / sum;
  }
  return pi + (c.bias ? bias[e] : 0.0);
}

class RouterFusedCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cuda_ = CudaBackendOrNull();
    if (!cuda_) GTEST_SKIP() << kNoDeviceMessage;
    absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateBackend("cpu", {.num_threads = 2});
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = *std::move(cpu);
    was_enabled_ = kernels::SetRouterFusedCuda(true);
  }
  void TearDown() override { kernels::SetRouterFusedCuda(was_enabled_); }

  void Run(const Case& c) {
    SCOPED_TRACE(absl::StrFormat(
        "in %d experts %d top_k %d rows %d pad %d gating %d bias %d norm %d scale %g dup %d", c.in,
        c.experts, c.top_k, c.rows, c.x_pad, static_cast<int>(c.gating), c.bias, c.normalize,
        c.scale, c.duplicate_rows));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> uniform(-0.05f, 0.05f);
    const int64_t x_stride = c.in + c.x_pad;
    std::vector<float> x(static_cast<size_t>(x_stride * c.rows), 1e30f);  // pads never read
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t i = 0; i < c.in; ++i) x[r * x_stride + i] = normal(rng_);
    }
    // Router weights at the scale of a trained router (logits of a few units).
    std::vector<float> w(static_cast<size_t>(c.in * c.experts));
    const float w_scale = 2.0f / std::sqrt(static_cast<float>(c.in));
    for (int64_t e = 0; e < c.experts; ++e) {
      for (int64_t i = 0; i < c.in; ++i) {
        w[e * c.in + i] =
            c.duplicate_rows && e % 2 == 1 ? w[(e - 1) * c.in + i] : w_scale * normal(rng_);
      }
    }
    std::vector<float> bias(static_cast<size_t>(c.experts));
    for (float& b : bias) b = c.duplicate_rows ? 0.0f : uniform(rng_);

    RouterParams p{
        .top_k = c.top_k, .gating = c.gating, .normalize = c.normalize, .scale = c.scale};
    WeightView router;
    router.type = GgmlType::kF32;
    router.ne[0] = c.in;
    router.ne[1] = c.experts;
    const size_t n = static_cast<size_t>(c.rows * c.top_k);
    const size_t n_logits = static_cast<size_t>(c.rows * c.experts);

    // CPU reference.
    std::vector<float> want_logits(n_logits, NAN), want_weights(n, NAN);
    std::vector<int32_t> want_ids(n, -7);
    router.data = w.data();
    if (c.bias) p.bias = bias;
    ASSERT_TRUE(cpu_->Route(TensorView::F32(x.data(), c.in, c.rows, x_stride), router,
                            TensorView::F32(want_logits.data(), c.experts, c.rows), p, want_ids,
                            want_weights)
                    .ok());

    // CUDA.
    BackendBuffer dx = UploadBytes(*cuda_, x.data(), x.size() * 4);
    BackendBuffer dw = UploadBytes(*cuda_, w.data(), w.size() * 4);
    BackendBuffer dbias = UploadBytes(*cuda_, bias.data(), bias.size() * 4);
    std::vector<float> got_logits(n_logits, NAN), got_weights(n, NAN);
    std::vector<int32_t> got_ids(n, -7);
    BackendBuffer dlogits = UploadBytes(*cuda_, got_logits.data(), n_logits * 4);
    BackendBuffer dids = UploadBytes(*cuda_, got_ids.data(), n * 4);
    BackendBuffer dweights = UploadBytes(*cuda_, got_weights.data(), n * 4);
    router.data = dw.data();
    if (c.bias) p.bias = {static_cast<const float*>(dbias.data()), bias.size()};
    const absl::Status status = cuda_->Route(
        TensorView::F32(static_cast<float*>(dx.data()), c.in, c.rows, x_stride), router,
        TensorView::F32(dlogits.f32(), c.experts, c.rows), p,
        {static_cast<int32_t*>(dids.data()), n}, {static_cast<float*>(dweights.data()), n});
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_TRUE(cuda_->Download(dlogits.data(), got_logits.data(), n_logits * 4).ok());
    ASSERT_TRUE(cuda_->Download(dids.data(), got_ids.data(), n * 4).ok());
    ASSERT_TRUE(cuda_->Download(dweights.data(), got_weights.data(), n * 4).ok());

    EXPECT_LE(RelError(got_logits, want_logits), kLogitBound);
    int64_t mismatched = 0, near_ties = 0;
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t k = 0; k < c.top_k; ++k) {
        const size_t i = static_cast<size_t>(r * c.top_k + k);
        if (got_ids[i] == want_ids[i]) continue;
        const bool valid = got_ids[i] >= 0 && got_ids[i] < c.experts;
        if (!c.duplicate_rows && valid &&
            std::fabs(Score(want_logits, c.experts, r, got_ids[i], c, bias) -
                      Score(want_logits, c.experts, r, want_ids[i], c, bias)) < kNearTie) {
          ++near_ties;
        } else {
          ++mismatched;
        }
      }
    }
    EXPECT_EQ(mismatched, 0) << "ids differ beyond near-ties (" << near_ties << " near-ties)";
    if (near_ties == 0) EXPECT_LE(RelError(got_weights, want_weights), kWeightBound);
  }

  std::unique_ptr<Backend> cuda_, cpu_;
  bool was_enabled_ = false;
  std::mt19937 rng_{20261203};
};

TEST_F(RouterFusedCudaTest, MatchesCpuRoute) {
  using G = GatingFunc;
  const Case cases[] = {
      {4096, 288, 8, 1, 0, G::kSigmoid, true, true, 3.0f, false},   // Step-3.5 decode
      {4096, 288, 8, 4, 12, G::kSigmoid, true, true, 3.0f, false},  // 4 streams, padded x
      {6144, 352, 8, 2, 0, G::kSigmoid, true, true, 2.5f, false},   // Step-5 shapes
      {8192, 512, 16, 3, 0, G::kSoftmax, false, false, 1.0f, false},
      {1028, 37, 5, 1, 4, G::kSoftmax, true, true, 3.0f, false},   // odd sizes
      {4096, 288, 8, 1, 0, G::kSigmoid, false, true, 1.0f, true},  // exact ties
      {4096, 8, 8, 2, 0, G::kSigmoid, false, true, 0.0f, false},   // top_k == experts
      {4096, 288, 8, 5, 0, G::kSigmoid, true, true, 3.0f, false},  // 5 rows: unfused
      {4096, 288, 8, 16, 0, G::kSigmoid, true, true, 3.0f, false},
  };
  for (const Case& c : cases) Run(c);
}

// The same backend routes many times in a row with changing expert counts: each launch's last
// CTA must leave the ticket at zero for the next.
TEST_F(RouterFusedCudaTest, BackToBackLaunchesReuseTheTicket) {
  for (int repeat = 0; repeat < 3; ++repeat) {
    Run({4096, 288, 8, 1, 0, GatingFunc::kSigmoid, true, true, 3.0f, false});
    Run({1028, 37, 5, 2, 0, GatingFunc::kSoftmax, false, true, 1.0f, false});
    Run({4096, 512, 8, 1, 0, GatingFunc::kSigmoid, true, false, 1.0f, false});
  }
}

TEST(RouterFusedCudaLimits, SupportsOnlyDecodeShapes) {
  static float dummy[8] __attribute__((aligned(16)));
  kernels::RouterFusedArgs a;
  a.x = dummy;
  a.w = dummy;
  a.in = 4096;
  a.x_stride = 4096;
  a.w_stride = 4096;
  a.select.rows = 1;
  a.select.n_experts = 288;
  a.select.top_k = 8;
  EXPECT_TRUE(kernels::RouterFusedCudaSupports(a));
  a.select.rows = kernels::kRouterFusedMaxRows + 1;
  EXPECT_FALSE(kernels::RouterFusedCudaSupports(a));
  a.select.rows = 1;
  a.in = 4094;  // not a multiple of 4
  EXPECT_FALSE(kernels::RouterFusedCudaSupports(a));
  a.in = kernels::kRouterFusedMaxIn + 4;
  EXPECT_FALSE(kernels::RouterFusedCudaSupports(a));
  a.in = 4096;
  a.select.n_experts = kernels::kRouterFusedMaxExperts + 1;
  EXPECT_FALSE(kernels::RouterFusedCudaSupports(a));
  a.select.n_experts = 288;
  a.x = dummy + 1;  // not 16-byte aligned
  EXPECT_FALSE(kernels::RouterFusedCudaSupports(a));
}

}  // namespace
}  // namespace stepserve
