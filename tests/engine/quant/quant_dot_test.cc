// DotRow against DequantizeRow + a plain double-precision dot on fresh random blocks.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/quant/ggml_type.h"
#include "engine/quant/quant.h"
#include "gtest/gtest.h"

namespace stepserve::quant {
namespace {

const GgmlType kTypes[] = {
    GgmlType::kF32,   GgmlType::kF16,     GgmlType::kBF16,   GgmlType::kQ8_0,  GgmlType::kQ4_0,
    GgmlType::kQ2_K,  GgmlType::kQ3_K,    GgmlType::kQ4_K,   GgmlType::kQ5_K,  GgmlType::kQ6_K,
    GgmlType::kQ8_K,  GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S, GgmlType::kIQ3_XXS,
    GgmlType::kIQ3_S, GgmlType::kIQ4_NL,  GgmlType::kIQ4_XS,
};

class QuantDotTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(QuantDotTest, MatchesDequantizeThenDot) {
  const GgmlType type = GetParam();
  const GgmlTypeInfo& info = TypeInfo(type);
  std::mt19937_64 rng(99 + static_cast<int>(type));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Odd block counts; for plain types lengths that are not a multiple of 8 or of 256.
  for (int64_t blocks : {1, 3, 9, 33}) {
    const int64_t n = info.block_elems == 1 ? blocks * 37 + 5 : blocks * info.block_elems;
    std::vector<uint8_t> w(RowBytes(type, n));
    ASSERT_TRUE(FillRandomBlocks(type, w.data(), n / info.block_elems, rng(), 0.05f).ok());
    std::vector<float> x(n);
    for (float& v : x) v = normal(rng);
    std::vector<float> wf(n, std::nanf(""));
    ASSERT_TRUE(DequantizeRow(type, w.data(), wf.data(), n).ok());
    double ref = 0.0, abs_sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      ref += static_cast<double>(wf[i]) * x[i];
      abs_sum += std::fabs(static_cast<double>(wf[i]) * x[i]);
    }
    const float got = DotRow(type, w.data(), x.data(), n);
    // Float32 accumulation in a different order: error grows with sum|w*x|, ~sqrt(n) * 2^-24.
    EXPECT_NEAR(got, ref, 1e-6 * abs_sum + 1e-30) << GgmlTypeName(type) << " n=" << n;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantDotTest, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(GgmlTypeName(info.param)); });

TEST(QuantDot, BadArgumentsGiveNaN) {
  std::vector<uint8_t> w(1024);
  std::vector<float> x(512);
  EXPECT_TRUE(std::isnan(DotRow(GgmlType::kQ4_K, w.data(), x.data(), 100)));
  EXPECT_TRUE(std::isnan(DotRow(GgmlType::kIQ1_S, w.data(), x.data(), 256)));
}

}  // namespace
}  // namespace stepserve::quant
