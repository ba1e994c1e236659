// QuantizeRow then DequantizeRow on fresh random data: RMS relative error per type under a stated
// bound, odd row counts, outputs poisoned first.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/quant/float16.h"
#include "engine/quant/ggml_type.h"
#include "engine/quant/quant.h"
#include "gtest/gtest.h"

namespace stepserve::quant {
namespace {

struct Case {
  GgmlType type;
  double max_rel_rms;  // ||dequant(quant(x)) - x|| / ||x||
};

// Bounds: F16 keeps 11 significant bits (~2^-12 rel), BF16 8 bits (~2^-9). Q8_0: step amax/127
// over 32 values (~0.5%). Q6_K: 6-bit codes with 8-bit sub-scales (~2%). Q4_K: 4-bit codes over
// each sub-block's full range, plus 6-bit scale/min rounding (~8%).
const Case kCases[] = {
    {GgmlType::kF32, 0.0},   {GgmlType::kF16, 4e-4},  {GgmlType::kBF16, 3e-3},
    {GgmlType::kQ8_0, 0.01}, {GgmlType::kQ6_K, 0.03}, {GgmlType::kQ4_K, 0.12},
};

class QuantRoundTripTest : public ::testing::TestWithParam<Case> {};

TEST_P(QuantRoundTripTest, RandomRows) {
  const Case c = GetParam();
  const GgmlTypeInfo& info = TypeInfo(c.type);
  ASSERT_TRUE(CanQuantize(c.type));
  std::mt19937_64 rng(1234 + static_cast<int>(c.type));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t blocks : {1, 3, 7}) {  // odd counts
    const int64_t n = blocks * (info.block_elems == 1 ? 97 : info.block_elems);
    std::vector<float> x(n);
    // A mean offset and an outlier make min/max handling matter.
    for (float& v : x) v = 0.02f * normal(rng) + 0.003f;
    x[n / 3] = 0.15f;
    std::vector<uint8_t> q(RowBytes(c.type, n) + 1, 0xA5);
    const uint8_t guard = 0x5A;
    q.back() = guard;
    ASSERT_TRUE(QuantizeRow(c.type, x.data(), q.data(), n).ok());
    EXPECT_EQ(q.back(), guard) << "QuantizeRow wrote past the row";
    std::vector<float> y(n + 1, std::nanf(""));
    ASSERT_TRUE(DequantizeRow(c.type, q.data(), y.data(), n).ok());
    EXPECT_TRUE(std::isnan(y[n])) << "DequantizeRow wrote past the row";
    double err = 0.0, ref = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << "element " << i;
      err += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
      ref += static_cast<double>(x[i]) * x[i];
    }
    const double rel = std::sqrt(err / ref);
    EXPECT_LE(rel, c.max_rel_rms) << GgmlTypeName(c.type) << " n=" << n;
    if (c.type == GgmlType::kF32) {
      EXPECT_EQ(rel, 0.0) << "F32 must round-trip exactly";
    }
  }
}

TEST_P(QuantRoundTripTest, ZeroRowStaysZero) {
  const Case c = GetParam();
  const int64_t n = TypeInfo(c.type).block_elems * 2;
  std::vector<float> x(n, 0.0f);
  std::vector<uint8_t> q(RowBytes(c.type, n), 0xFF);
  ASSERT_TRUE(QuantizeRow(c.type, x.data(), q.data(), n).ok());
  std::vector<float> y(n, 1.0f);
  ASSERT_TRUE(DequantizeRow(c.type, q.data(), y.data(), n).ok());
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], 0.0f) << i;
}

INSTANTIATE_TEST_SUITE_P(Types, QuantRoundTripTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) {
                           return std::string(GgmlTypeName(info.param.type));
                         });

TEST(QuantRoundTrip, RejectsPartialBlock) {
  std::vector<float> x(300, 1.0f);
  std::vector<uint8_t> q(1024);
  EXPECT_EQ(QuantizeRow(GgmlType::kQ8_0, x.data(), q.data(), 33).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeRow(GgmlType::kQ3_K, x.data(), q.data(), 256).code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace stepserve::quant
