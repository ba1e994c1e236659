// CudaBackend MoeExperts against the CPU backend: E = 16 experts, top_k = 4, T in {1, 5, 64, 300}
// tokens routed to a subset of the experts (several experts get no token; at T = 64 the active
// ones get > 16 tokens each, so both the GEMV and the GEMM paths run; at T = 300 the fast mode of
// IQ4_XS takes the grouped tensor-core GEMV on the device, the other types the host grouping), Q4_K
// / IQ4_XS / Q8_0 weights and the 2-3 bit IQ3_S / IQ2_XXS / Q2_K (their int8 GEMVs turned on),
// SwiGLU limit 0 (no clamp) and 7, y pre-filled (the op accumulates). Fresh random data every run
// (seed printed). Bound 1e-2: experts with <= 16 rows run exact F32 GEMVs (~1e-6), larger groups
// F16 GEMM tiles (~1e-3 through gate/up, SwiGLU and down); a wrong expert, slot or weight gives
// errors of order 1.
#include "kernels/moe/moe_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/quant/ggml_type.h"
#include "gtest/gtest.h"
#include "kernels/matmul/matmul_cuda.h"
#include "tests/gpu/backend_test_util.h"
#include "tests/gpu/weight_test_util.h"

namespace stepserve {
namespace {

using gpu_testing::CudaBackendOrNull;
using gpu_testing::DeviceMat;
using gpu_testing::DownloadMat;
using gpu_testing::HostWeight;
using gpu_testing::kNoDeviceMessage;
using gpu_testing::RandomHostWeight;
using gpu_testing::RandomNormal;
using gpu_testing::RelativeError;
using gpu_testing::UploadBytes;
using gpu_testing::UploadMat;

constexpr int64_t kExperts = 16;
constexpr int64_t kTopK = 4;
constexpr int64_t kEmbd = 256;
constexpr int64_t kFf = 512;
// Experts the router may pick; the other ten never get a token.
constexpr int32_t kActive[] = {0, 3, 4, 9, 14, 15};
constexpr double kMaxRelError = 1e-2;
// Fast mode (MoeGemvCuda): x and the SwiGLU intermediate are rounded to int8 per 32 values;
// measured ~1.1-1.3e-2 on these shapes, an indexing error gives order 1.
constexpr double kMaxRelErrorFast = 3e-2;

struct HostExperts {
  HostWeight gate, up, down;
  ExpertWeights view(float limit) const { return {gate.view, up.view, down.view, limit}; }
};

struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// Distinct experts per token (as a router picks them), weights in (0, 1).
Routing RandomRouting(int64_t tokens, std::mt19937_64& rng) {
  Routing r;
  std::uniform_real_distribution<float> weight(0.05f, 1.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> pool(std::begin(kActive), std::end(kActive));
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int64_t k = 0; k < kTopK; ++k) {
      r.ids.push_back(pool[k]);
      r.weights.push_back(weight(rng));
    }
  }
  return r;
}

class MoeExpertsCudaTest : public testing::TestWithParam<std::tuple<GgmlType, int64_t, float>> {};

TEST_P(MoeExpertsCudaTest, MatchesCpuBackend) {
  // The 2-3 bit types take the int8 GEMVs and the device MoE only while turned on (matmul_cuda.h).
  struct LowBitScope {
    bool was = kernels::SetGemvCudaLowBitTypes(true);
    ~LowBitScope() { kernels::SetGemvCudaLowBitTypes(was); }
  } low_bit;
  for (const bool exact : {true, false}) {
    std::unique_ptr<Backend> cuda = CudaBackendOrNull(exact);
    if (!cuda) GTEST_SKIP() << kNoDeviceMessage;
    const auto [type, tokens, limit] = GetParam();
    const uint64_t seed = std::random_device{}();
    const std::string what = std::string(exact ? "exact " : "fast ") +
                             std::string(GgmlTypeName(type)) + " T " + std::to_string(tokens) +
                             " limit " + std::to_string(limit) + " seed " + std::to_string(seed);
    std::mt19937_64 rng(seed);
    // Gate/up outputs of a few units, so limit 7 clamps part of them.
    HostExperts host{RandomHostWeight(type, kEmbd, kFf, kExperts, seed, 0.25f),
                     RandomHostWeight(type, kEmbd, kFf, kExperts, seed + 1, 0.25f),
                     RandomHostWeight(type, kFf, kEmbd, kExperts, seed + 2, 0.05f)};
    ExpertWeights placed;
    placed.limit = limit;
    for (auto [src, dst, name] :
         {std::tuple{&host.gate, &placed.gate, "gate"}, std::tuple{&host.up, &placed.up, "up"},
          std::tuple{&host.down, &placed.down, "down"}}) {
      absl::StatusOr<WeightView> w = cuda->PlaceWeight(src->view, name);
      ASSERT_TRUE(w.ok()) << w.status();
      *dst = *w;
    }
    const std::vector<float> x = RandomNormal(static_cast<size_t>(kEmbd * tokens), rng);
    const std::vector<float> y0 = RandomNormal(static_cast<size_t>(kEmbd * tokens), rng);
    const Routing routing = RandomRouting(tokens, rng);

    std::vector<float> ref = y0;
    absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateBackend("cpu", {.num_threads = 2});
    ASSERT_TRUE(cpu.ok());
    std::vector<float> x_host = x;
    ASSERT_TRUE((*cpu)
                    ->MoeExperts(TensorView::F32(x_host.data(), kEmbd, tokens), host.view(limit),
                                 routing.ids, routing.weights, kTopK,
                                 TensorView::F32(ref.data(), kEmbd, tokens))
                    .ok());

    DeviceMat dx = UploadMat(*cuda, x, kEmbd, tokens);
    DeviceMat dy = UploadMat(*cuda, y0, kEmbd, tokens);
    BackendBuffer ids = UploadBytes(*cuda, routing.ids.data(), routing.ids.size() * 4);
    BackendBuffer weights = UploadBytes(*cuda, routing.weights.data(), routing.weights.size() * 4);
    const std::span<const int32_t> ids_dev(static_cast<const int32_t*>(ids.data()),
                                           routing.ids.size());
    const std::span<const float> weights_dev(static_cast<const float*>(weights.data()),
                                             routing.weights.size());
    const absl::Status status =
        cuda->MoeExperts(dx.view, placed, ids_dev, weights_dev, kTopK, dy.view);
    ASSERT_TRUE(status.ok()) << what << ": " << status;
    // Compare the increments (y - y0): the pre-filled part is not what the op computes.
    std::vector<float> got = DownloadMat(*cuda, dy);
    for (size_t i = 0; i < got.size(); ++i) {
      got[i] -= y0[i];
      ref[i] -= y0[i];
    }
    const double err = RelativeError(got, ref);
    EXPECT_LE(err, exact ? kMaxRelError : kMaxRelErrorFast) << what;
    std::printf("[ rel err  ] %s: %.3g\n", what.c_str(), err);
  }
}

INSTANTIATE_TEST_SUITE_P(Routed, MoeExpertsCudaTest,
                         testing::Combine(testing::Values(GgmlType::kQ4_K, GgmlType::kIQ4_XS,
                                                          GgmlType::kQ8_0, GgmlType::kIQ3_S,
                                                          GgmlType::kIQ2_XXS, GgmlType::kQ2_K),
                                          testing::Values(1, 5, 64, 300),
                                          testing::Values(0.0f, 7.0f)),
                         [](const auto& info) {
                           return std::string(GgmlTypeName(std::get<0>(info.param))) + "_T" +
                                  std::to_string(std::get<1>(info.param)) + "_limit" +
                                  std::to_string(static_cast<int>(std::get<2>(info.param)));
                         });

TEST(MoeExpertsCudaErrorsTest, OutOfRangeExpertIdIsNamed) {
  std::unique_ptr<Backend> cuda = CudaBackendOrNull(/*exact_activations=*/true);
  if (!cuda) GTEST_SKIP() << kNoDeviceMessage;
  HostExperts host{RandomHostWeight(GgmlType::kQ8_0, kEmbd, kFf, kExperts, 1, 0.25f),
                   RandomHostWeight(GgmlType::kQ8_0, kEmbd, kFf, kExperts, 2, 0.25f),
                   RandomHostWeight(GgmlType::kQ8_0, kFf, kEmbd, kExperts, 3, 0.05f)};
  ExpertWeights placed;
  placed.gate = *cuda->PlaceWeight(host.gate.view, "gate");
  placed.up = *cuda->PlaceWeight(host.up.view, "up");
  placed.down = *cuda->PlaceWeight(host.down.view, "down");
  std::mt19937_64 rng(4);
  DeviceMat dx = UploadMat(*cuda, RandomNormal(kEmbd * 2, rng), kEmbd, 2);
  DeviceMat dy = UploadMat(*cuda, std::vector<float>(kEmbd * 2, 0.0f), kEmbd, 2);
  const std::vector<int32_t> bad = {0, 1, 2, 3, 4, 5, 16, 7};
  const std::vector<float> w(bad.size(), 0.25f);
  BackendBuffer ids = UploadBytes(*cuda, bad.data(), bad.size() * 4);
  BackendBuffer weights = UploadBytes(*cuda, w.data(), w.size() * 4);
  const absl::Status status = cuda->MoeExperts(
      dx.view, placed, std::span<const int32_t>(static_cast<const int32_t*>(ids.data()), 8),
      std::span<const float>(static_cast<const float*>(weights.data()), 8), kTopK, dy.view);
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange) << status;
  EXPECT_NE(std::string(status.message()).find("expert id 16"), std::string::npos) << status;
  for (float v : DownloadMat(*cuda, dy)) ASSERT_EQ(v, 0.0f);  // y untouched
}

// The host-side grouping runs everywhere (no device needed).
TEST(PlanMoeGroupsTest, GroupsPairsByExpertInPairOrder) {
  // 3 tokens, top_k 2, 4 experts (expert 1 unused).
  const std::vector<int32_t> ids = {2, 0, 2, 3, 0, 2};
  kernels::MoeGroups g;
  ASSERT_EQ(kernels::PlanMoeGroups(ids.data(), 3, 2, 4, &g), kernels::KernelStatus::kOk);
  EXPECT_EQ(g.offsets, (std::vector<int32_t>{0, 2, 2, 5, 6}));
  EXPECT_EQ(g.slot_token, (std::vector<int32_t>{0, 2, 0, 1, 2, 1}));
  EXPECT_EQ(g.pair_slot, (std::vector<int32_t>{2, 0, 3, 5, 1, 4}));
  EXPECT_EQ(g.bad_pair, -1);

  const std::vector<int32_t> bad = {0, 4, -1, 1};
  EXPECT_EQ(kernels::PlanMoeGroups(bad.data(), 2, 2, 4, &g), kernels::KernelStatus::kOutOfRange);
  EXPECT_EQ(g.bad_pair, 1);
  EXPECT_EQ(kernels::PlanMoeGroups(bad.data() + 2, 1, 2, 4, &g),
            kernels::KernelStatus::kOutOfRange);
  EXPECT_EQ(g.bad_pair, 0);
}

}  // namespace
}  // namespace stepserve
