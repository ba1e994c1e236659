// The device dequantizers of kernels/matmul/dequant_cuda.cuh run on the host here (they are
// __host__ __device__), group by group, against engine/quant's DequantizeRow on random valid
// blocks: the block indexing, scale unpacking, grids and signs must agree bit for bit. Needs no
// GPU, so CI checks the device code's logic; the GPU tests then check the same on the device.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/quant/ggml_type.h"
#include "engine/quant/quant.h"
#include "engine/quant/quant_tables.h"
#include "gtest/gtest.h"
#include "kernels/matmul/dequant_cuda.cuh"

namespace stepserve::kernels {
namespace {

DequantTables HostTables() {
  DequantTables t;
  t.iq2xxs_grid = quant::kIq2xxsGrid;
  t.iq2xs_grid = quant::kIq2xsGrid;
  t.iq2s_grid = quant::kIq2sGrid;
  t.iq3xxs_grid = quant::kIq3xxsGrid;
  t.iq3s_grid = quant::kIq3sGrid;
  t.ksigns = quant::kKsignsIq2xs;
  t.iq4nl_values = quant::kKvaluesIq4nl;
  return t;
}

class DequantDeviceCodeTest : public testing::TestWithParam<GgmlType> {};

TEST_P(DequantDeviceCodeTest, MatchesDequantizeRowBitForBit) {
  const GgmlType type = GetParam();
  // Plain types also get a width that ends mid-group of 8.
  for (int64_t cols : {int64_t{1024}, TypeInfo(type).block_elems == 1 ? int64_t{77} : int64_t{256}}) {
    std::vector<uint8_t> row(static_cast<size_t>(RowBytes(type, cols)));
    const int64_t blocks = cols / TypeInfo(type).block_elems;
    ASSERT_TRUE(quant::FillRandomBlocks(type, row.data(), blocks, 1234 + cols, 1.0f).ok());
    std::vector<float> want(cols);
    ASSERT_TRUE(quant::DequantizeRow(type, row.data(), want.data(), cols).ok());
    const int64_t groups = (cols + 7) / 8;
    std::vector<float> got(static_cast<size_t>(8 * groups), -1.0f);
    const DequantTables tables = HostTables();
    ASSERT_TRUE(dequant_device::DispatchDequantType(type, [&](auto tag) {
      for (int64_t g = 0; g < groups; ++g) {
        dequant_device::DequantGroup<decltype(tag)::value>(row.data(), g, cols, tables,
                                                           got.data() + 8 * g);
      }
    }));
    for (int64_t i = 0; i < cols; ++i) {
      ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
          << GgmlTypeName(type) << " cols " << cols << " element " << i << ": got " << got[i]
          << ", want " << want[i];
    }
    for (int64_t i = cols; i < 8 * groups; ++i) EXPECT_EQ(got[i], 0.0f) << "tail element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, DequantDeviceCodeTest,
    testing::Values(GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                    GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K,
                    GgmlType::kQ6_K, GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S,
                    GgmlType::kIQ3_XXS, GgmlType::kIQ3_S, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS),
    [](const auto& info) { return std::string(GgmlTypeName(info.param)); });

TEST(DequantDeviceDispatchTest, RejectsTypesWithoutDeviceCode) {
  EXPECT_FALSE(dequant_device::DispatchDequantType(GgmlType::kQ4_0, [](auto) {}));
  EXPECT_FALSE(dequant_device::DispatchDequantType(GgmlType::kIQ1_S, [](auto) {}));
}

}  // namespace
}  // namespace stepserve::kernels
