// The fused FFN entry on the CUDA backend (NormRouterTopK as one kernel, kernels/moe/
// ffn_entry_cuda.h, STEPSERVE_FFN_ENTRY) against the separate ops it replaces (AddRmsNorm or
// RmsNorm, the router Matmul, RouterTopK) on fresh random data: Step-3.5's 288 and Step-5's 352
// experts, 1-4 rows, with and without the residual add, sigmoid and softmax gating. Outputs start
// poisoned (NaN logits and weights, -1 ids). Bounds:
//  - h, the norm's output and the Matmul that reads its int8 form: bitwise equal (the kernel
//    forms them with the norm kernel's threads and reduction, and the q8 bytes with its code);
//  - logits: ||fused - separate|| / ||separate|| per row <= 1e-5 (the router dots are summed in
//    another order);
//  - ids and weights: bitwise RouterTopK's on the fused kernel's own logits (the selection is the
//    same device code); against the separate path the same ids except where two experts'
//    selection scores (from the separate logits) differ by less than 1e-5.
// ffn_entry_uses() proves the fused kernel ran; a second call on the same backend proves the
// arrival counter was left at zero.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
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
using gpu_testing::RandomHostWeight;
using gpu_testing::RandomNormal;
using gpu_testing::UploadBytes;
using gpu_testing::UploadMat;

constexpr int64_t kEmbd = 4096;
constexpr int64_t kOut = 520;  // the IQ4_XS Matmul that reads the norm's int8 activations
constexpr int64_t kTopK = 8;
constexpr double kLogitBound = 1e-5;
constexpr double kTieScore = 1e-5;

struct FfnEntryScope {
  bool was;
  explicit FfnEntryScope(bool enabled) : was(SetCudaFusedFfnEntry(enabled)) {}
  ~FfnEntryScope() { SetCudaFusedFfnEntry(was); }
};

bool BitwiseEqual(const void* a, const void* b, size_t bytes) {
  return std::memcmp(a, b, bytes) == 0;
}

// Everything one NormRouterTopK (+ the Matmul after it) leaves behind.
struct EntryResult {
  std::vector<float> h, out, logits, weights, y;
  std::vector<int32_t> ids;
};

struct Case {
  int64_t experts;
  int64_t rows;
  bool with_add;
  GatingFunc gating;
};

class FfnEntryCudaTest : public testing::Test {
 protected:
  void SetUp() override {
    backend_ = CudaBackendOrNull();
    if (!backend_) GTEST_SKIP() << kNoDeviceMessage;
    cuda_ = dynamic_cast<CudaBackend*>(backend_.get());
    ASSERT_NE(cuda_, nullptr);
    seed_ = std::random_device{}();
    std::printf("seed %u\n", seed_);
  }

  WeightView Place(GgmlType type, int64_t in, int64_t out, uint64_t seed, float rms) {
    gpu_testing::HostWeight host = RandomHostWeight(type, in, out, 1, seed, rms);
    absl::StatusOr<WeightView> placed = backend_->PlaceWeight(host.view, "w");
    EXPECT_TRUE(placed.ok()) << placed.status();
    return placed.ok() ? *placed : WeightView{};
  }

  // An F32 norm weight of kEmbd values in backend memory (kept alive by `buffer`).
  WeightView NormWeight(const std::vector<float>& values, BackendBuffer* buffer) {
    *buffer = UploadBytes(*backend_, values.data(), values.size() * 4);
    WeightView w;
    w.data = buffer->data();
    w.type = GgmlType::kF32;
    w.ne[0] = kEmbd;
    return w;
  }

  // One NormRouterTopK on fresh copies of h0 / delta, then the Matmul reading its output.
  EntryResult Run(const Case& c, const std::vector<float>& h0, const std::vector<float>& delta,
                  const WeightView& norm, const WeightView& router, const WeightView& w,
                  const RouterParams& params) {
    EntryResult r;
    DeviceMat h = UploadMat(*backend_, h0, kEmbd, c.rows);
    DeviceMat d = UploadMat(*backend_, delta, kEmbd, c.rows);
    DeviceMat out = gpu_testing::PoisonedMat(*backend_, kEmbd, c.rows);
    DeviceMat logits = gpu_testing::PoisonedMat(*backend_, c.experts, c.rows);
    DeviceMat y = gpu_testing::PoisonedMat(*backend_, kOut, c.rows);
    const size_t n = static_cast<size_t>(c.rows * kTopK);
    std::vector<int32_t> ids(n, -1);
    std::vector<float> weights(n, NAN);
    BackendBuffer dids = UploadBytes(*backend_, ids.data(), n * 4);
    BackendBuffer dweights = UploadBytes(*backend_, weights.data(), n * 4);
    const TensorView no_delta;
    const absl::Status s = backend_->NormRouterTopK(
        h.view, c.with_add ? d.view : no_delta, norm, 1e-5f, out.view, router, logits.view, params,
        {static_cast<int32_t*>(dids.data()), n}, {static_cast<float*>(dweights.data()), n});
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_TRUE(backend_->Matmul(out.view, w, y.view).ok());
    r.h = DownloadMat(*backend_, h);
    r.out = DownloadMat(*backend_, out);
    r.logits = DownloadMat(*backend_, logits);
    r.y = DownloadMat(*backend_, y);
    r.ids.resize(n);
    r.weights.resize(n);
    EXPECT_TRUE(backend_->Download(dids.data(), r.ids.data(), n * 4).ok());
    EXPECT_TRUE(backend_->Download(dweights.data(), r.weights.data(), n * 4).ok());
    return r;
  }

  // RouterTopK on the device over `logits` (the fused kernel's own).
  void Select(const Case& c, const std::vector<float>& logits, const RouterParams& params,
              std::vector<int32_t>* ids, std::vector<float>* weights) {
    DeviceMat dl = UploadMat(*backend_, logits, c.experts, c.rows);
    const size_t n = static_cast<size_t>(c.rows * kTopK);
    ids->assign(n, -1);
    weights->assign(n, NAN);
    BackendBuffer dids = UploadBytes(*backend_, ids->data(), n * 4);
    BackendBuffer dweights = UploadBytes(*backend_, weights->data(), n * 4);
    ASSERT_TRUE(backend_
                    ->RouterTopK(dl.view, params, {static_cast<int32_t*>(dids.data()), n},
                                 {static_cast<float*>(dweights.data()), n})
                    .ok());
    ASSERT_TRUE(backend_->Download(dids.data(), ids->data(), n * 4).ok());
    ASSERT_TRUE(backend_->Download(dweights.data(), weights->data(), n * 4).ok());
  }

  std::unique_ptr<Backend> backend_;
  CudaBackend* cuda_ = nullptr;
  unsigned seed_ = 0;
};

// The selection score of expert e in row `row` (the router's formula, in double).
double Score(const std::vector<float>& logits, int64_t experts, int64_t row, int64_t e,
             GatingFunc gating, const std::vector<float>& bias) {
  const float* l = logits.data() + row * experts;
  double pi = 0;
  if (gating == GatingFunc::kSoftmax) {
    double max = l[0], sum = 0;
    for (int64_t i = 0; i < experts; ++i) max = std::max<double>(max, l[i]);
    for (int64_t i = 0; i < experts; ++i) sum += std::exp(l[i] - max);
    pi = std::exp(l[e] - max) / sum;
  } else {
    pi = 1.0 / (1.0 + std::exp(-static_cast<double>(l[e])));
  }
  return pi + bias[static_cast<size_t>(e)];
}

TEST_F(FfnEntryCudaTest, FusedEntryMatchesTheSeparateOps) {
  std::mt19937_64 rng(seed_);
  const WeightView w = Place(GgmlType::kIQ4_XS, kEmbd, kOut, seed_ + 1, 0.05f);
  std::vector<float> norm_values = RandomNormal(kEmbd, rng, 0.5f);
  for (float& v : norm_values) v += 1.0f;
  BackendBuffer dnorm;
  const WeightView norm = NormWeight(norm_values, &dnorm);
  for (const int64_t experts : {int64_t{288}, int64_t{352}}) {
    const WeightView router = Place(GgmlType::kF32, kEmbd, experts, seed_ + experts, 0.02f);
    const std::vector<float> bias = RandomNormal(static_cast<size_t>(experts), rng, 0.01f);
    BackendBuffer dbias = UploadBytes(*backend_, bias.data(), bias.size() * 4);
    for (const int64_t rows : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}}) {
      for (const bool with_add : {true, false}) {
        for (const GatingFunc gating : {GatingFunc::kSigmoid, GatingFunc::kSoftmax}) {
          const Case c{experts, rows, with_add, gating};
          SCOPED_TRACE(absl::StrFormat("experts %d rows %d %s %s", experts, rows,
                                       with_add ? "add" : "no add",
                                       gating == GatingFunc::kSoftmax ? "softmax" : "sigmoid"));
          RouterParams params{.top_k = kTopK,
                              .gating = gating,
                              .bias = {static_cast<const float*>(dbias.data()), bias.size()},
                              .normalize = gating == GatingFunc::kSigmoid,
                              .scale = gating == GatingFunc::kSigmoid ? 3.0f : 1.0f};
          const std::vector<float> h0 = RandomNormal(static_cast<size_t>(kEmbd * rows), rng);
          const std::vector<float> delta = RandomNormal(static_cast<size_t>(kEmbd * rows), rng);
          EntryResult got[2];
          for (const bool fused : {false, true}) {
            const FfnEntryScope scope(fused);
            const uint64_t uses = cuda_->ffn_entry_uses();
            got[fused] = Run(c, h0, delta, norm, router, w, params);
            EXPECT_EQ(cuda_->ffn_entry_uses() - uses, fused ? 1u : 0u);
          }
          const EntryResult &sep = got[0], &fus = got[1];
          EXPECT_TRUE(BitwiseEqual(sep.h.data(), fus.h.data(), sep.h.size() * 4));
          EXPECT_TRUE(BitwiseEqual(sep.out.data(), fus.out.data(), sep.out.size() * 4));
          EXPECT_TRUE(BitwiseEqual(sep.y.data(), fus.y.data(), sep.y.size() * 4));
          for (int64_t r = 0; r < rows; ++r) {
            double diff = 0, norm2 = 0;
            for (int64_t e = 0; e < experts; ++e) {
              const double a = sep.logits[r * experts + e], b = fus.logits[r * experts + e];
              diff += (a - b) * (a - b);
              norm2 += a * a;
            }
            EXPECT_LE(std::sqrt(diff / norm2), kLogitBound) << "row " << r;  // NaN fails too
          }
          // The selection: exactly RouterTopK's over the fused logits.
          std::vector<int32_t> want_ids;
          std::vector<float> want_weights;
          Select(c, fus.logits, params, &want_ids, &want_weights);
          EXPECT_EQ(fus.ids, want_ids);
          EXPECT_TRUE(
              BitwiseEqual(fus.weights.data(), want_weights.data(), want_weights.size() * 4));
          // And the separate path's ids, but for near-ties.
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t k = 0; k < kTopK; ++k) {
              const size_t i = static_cast<size_t>(r * kTopK + k);
              if (fus.ids[i] == sep.ids[i]) continue;
              ASSERT_GE(fus.ids[i], 0);
              const double gap = std::fabs(Score(sep.logits, experts, r, fus.ids[i], gating, bias) -
                                           Score(sep.logits, experts, r, sep.ids[i], gating, bias));
              EXPECT_LT(gap, kTieScore) << "row " << r << " pick " << k;
            }
          }
        }
      }
    }
  }
}

// Shapes the kernel does not take (5 rows; a Q8_0 router) run the separate ops, with the same
// results as with the switch off.
TEST_F(FfnEntryCudaTest, OtherShapesRunTheSeparateOps) {
  std::mt19937_64 rng(seed_);
  const WeightView w = Place(GgmlType::kIQ4_XS, kEmbd, kOut, seed_ + 1, 0.05f);
  BackendBuffer dnorm;
  const WeightView norm = NormWeight(std::vector<float>(kEmbd, 1.0f), &dnorm);
  const int64_t experts = 288;
  for (const GgmlType router_type : {GgmlType::kF32, GgmlType::kQ8_0}) {
    const int64_t rows = router_type == GgmlType::kF32 ? 5 : 1;
    const Case c{experts, rows, true, GatingFunc::kSigmoid};
    const WeightView router = Place(router_type, kEmbd, experts, seed_ + 2, 0.02f);
    const RouterParams params{.top_k = kTopK, .gating = GatingFunc::kSigmoid};
    const std::vector<float> h0 = RandomNormal(static_cast<size_t>(kEmbd * rows), rng);
    const std::vector<float> delta = RandomNormal(static_cast<size_t>(kEmbd * rows), rng);
    EntryResult got[2];
    for (const bool fused : {false, true}) {
      const FfnEntryScope scope(fused);
      const uint64_t uses = cuda_->ffn_entry_uses();
      got[fused] = Run(c, h0, delta, norm, router, w, params);
      EXPECT_EQ(cuda_->ffn_entry_uses(), uses);
    }
    EXPECT_TRUE(BitwiseEqual(got[0].logits.data(), got[1].logits.data(), got[0].logits.size() * 4));
    EXPECT_EQ(got[0].ids, got[1].ids);
    EXPECT_TRUE(BitwiseEqual(got[0].y.data(), got[1].y.data(), got[0].y.size() * 4));
  }
}

}  // namespace
}  // namespace stepserve
