// FillRandomBlocks for every dequantizable type: valid (finite) values near the target RMS,
// roughly zero-mean, deterministic per seed, different across seeds, no writes past the end.
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/quant/float16.h"
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

class QuantRandomTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(QuantRandomTest, ValidBlocksNearTargetRms) {
  const GgmlType type = GetParam();
  ASSERT_TRUE(CanFillRandom(type));
  const GgmlTypeInfo& info = TypeInfo(type);
  for (float target : {0.02f, 1.5f}) {
    const int64_t n_blocks = info.block_elems == 1 ? 4099 : 37;
    const int64_t n = n_blocks * info.block_elems;
    std::vector<uint8_t> blocks(n_blocks * info.block_bytes + 1, 0xEE);
    ASSERT_TRUE(FillRandomBlocks(type, blocks.data(), n_blocks, 42, target).ok());
    EXPECT_EQ(blocks.back(), 0xEE) << "wrote past the last block";
    std::vector<float> y(n, std::nanf(""));
    ASSERT_TRUE(DequantizeRow(type, blocks.data(), y.data(), n).ok());
    double sum = 0.0, sum_sq = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << "element " << i;
      sum += y[i];
      sum_sq += static_cast<double>(y[i]) * y[i];
    }
    const double rms = std::sqrt(sum_sq / n);
    const double mean = sum / n;
    EXPECT_GT(rms, target / 2.0) << GgmlTypeName(type);
    EXPECT_LT(rms, target * 2.0) << GgmlTypeName(type);
    EXPECT_LT(std::fabs(mean), 0.2 * rms) << GgmlTypeName(type) << ": not roughly zero-mean";
    // Scale fields must be finite and positive f16 values.
    if (info.block_elems > 1 && type != GgmlType::kQ8_K) {
      const int64_t scale_offset = type == GgmlType::kQ2_K   ? 80
                                   : type == GgmlType::kQ3_K ? 108
                                   : type == GgmlType::kQ6_K ? 208
                                                             : 0;
      for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* p = blocks.data() + b * info.block_bytes + scale_offset;
        const float d = F16ToF32(static_cast<uint16_t>(p[0] | (p[1] << 8)));
        ASSERT_TRUE(std::isfinite(d) && d > 0.0f) << "block " << b << " d=" << d;
      }
    }
  }
}

TEST_P(QuantRandomTest, DeterministicPerSeed) {
  const GgmlType type = GetParam();
  const GgmlTypeInfo& info = TypeInfo(type);
  const int64_t n_blocks = 5;
  const size_t bytes = n_blocks * info.block_bytes;
  std::vector<uint8_t> a(bytes, 0), b(bytes, 0xFF), c(bytes, 0);
  ASSERT_TRUE(FillRandomBlocks(type, a.data(), n_blocks, 7, 0.1f).ok());
  ASSERT_TRUE(FillRandomBlocks(type, b.data(), n_blocks, 7, 0.1f).ok());
  ASSERT_TRUE(FillRandomBlocks(type, c.data(), n_blocks, 8, 0.1f).ok());
  EXPECT_EQ(a, b) << "same seed must give the same bytes";
  EXPECT_NE(a, c) << "different seeds must differ";
}

INSTANTIATE_TEST_SUITE_P(Types, QuantRandomTest, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(GgmlTypeName(info.param)); });

TEST(QuantRandom, RejectsBadArguments) {
  std::vector<uint8_t> buf(1024);
  EXPECT_FALSE(FillRandomBlocks(GgmlType::kQ4_K, buf.data(), 1, 1, 0.0f).ok());
  EXPECT_FALSE(FillRandomBlocks(GgmlType::kQ4_K, buf.data(), 1, 1, std::nanf("")).ok());
  EXPECT_FALSE(FillRandomBlocks(GgmlType::kQ4_K, buf.data(), -1, 1, 1.0f).ok());
  EXPECT_EQ(FillRandomBlocks(GgmlType::kIQ1_M, buf.data(), 1, 1, 1.0f).code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace stepserve::quant
