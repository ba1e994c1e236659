// MatmulCpu against the dequantize + double reference over every dequantizable type.
#include "kernels/matmul/matmul.h"

#include <vector>

#include "engine/base/thread_pool.h"
#include "engine/quant/quant.h"
#include "gtest/gtest.h"
#include "tests/kernels/test_util.h"

namespace stepserve::kernels {
namespace {

using testing::Poisoned;
using testing::RandomVector;
using testing::RelError;

std::vector<GgmlType> DequantizableTypes() {
  std::vector<GgmlType> types;
  for (int32_t id = 0; id < kGgmlTypeCount; ++id) {
    auto info = LookupGgmlType(id);
    if (info && quant::CanDequantize(info->type) && quant::CanFillRandom(info->type)) {
      types.push_back(info->type);
    }
  }
  return types;
}

void CheckMatmul(GgmlType type, int64_t in, int64_t out, int64_t rows, ThreadPool* pool,
                 uint64_t seed) {
  SCOPED_TRACE(::testing::Message()
               << GgmlTypeName(type) << " in=" << in << " out=" << out << " rows=" << rows);
  const int64_t block_elems = TypeInfo(type).block_elems;
  const int64_t row_bytes = RowBytes(type, in);
  const int64_t w_row_bytes = row_bytes + 16;  // padded rows: the stride must be honoured
  std::vector<uint8_t> w(w_row_bytes * out, 0xAB);
  for (int64_t o = 0; o < out; ++o) {
    ASSERT_TRUE(
        quant::FillRandomBlocks(type, w.data() + o * w_row_bytes, in / block_elems, seed + o, 0.5f)
            .ok());
  }
  const int64_t x_stride = in + 3;
  const int64_t y_stride = out + 5;
  std::vector<float> x = RandomVector(rows * x_stride, seed ^ 0x55);
  MatmulArgs a{type, w.data(), w_row_bytes, in, out, x.data(), x_stride, rows, nullptr, y_stride};
  std::vector<float> ref = Poisoned(rows * y_stride);
  std::vector<float> got = Poisoned(rows * y_stride);
  a.y = ref.data();
  ASSERT_EQ(MatmulRef(a), KernelStatus::kOk);
  a.y = got.data();
  ASSERT_EQ(MatmulCpu(a, pool), KernelStatus::kOk);
  // Compare only the written region; padding must stay poisoned.
  std::vector<float> got_dense, ref_dense;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      got_dense.push_back(got[r * y_stride + o]);
      ref_dense.push_back(ref[r * y_stride + o]);
    }
    EXPECT_TRUE(std::isnan(got[r * y_stride + out])) << "wrote past the row";
  }
  EXPECT_LT(RelError(got_dense, ref_dense), 2e-5);
}

TEST(MatmulTest, EveryTypeOddSizesMatchesReference) {
  ThreadPool pool(3);
  const std::vector<GgmlType> types = DequantizableTypes();
  ASSERT_GE(types.size(), 10u);
  uint64_t seed = 1;
  for (GgmlType type : types) {
    const int64_t block = TypeInfo(type).block_elems;
    // `in`: a few blocks, odd block counts (96/160-like for 32-blocks; 1 or 3 blocks of 256).
    const int64_t in = block == 1 ? 97 : block == 32 ? 160 : 256 * 3;
    for (int64_t rows : {1, 3, 7}) CheckMatmul(type, in, 33, rows, &pool, seed++);
  }
}

TEST(MatmulTest, SingleThreadedAndLargeInput) {
  CheckMatmul(GgmlType::kQ4_K, 256 * 9, 17, 1, nullptr, 7);  // in > one 2048 chunk
  CheckMatmul(GgmlType::kQ8_0, 32 * 67, 19, 5, nullptr, 8);  // chunk tail not a 256 multiple
}

TEST(MatmulTest, RejectsBadArguments) {
  std::vector<uint8_t> w(1024);
  std::vector<float> x(64), y(64);
  MatmulArgs a{GgmlType::kQ8_0, w.data(), 34, 33, 1, x.data(), 33, 1, y.data(), 1};
  EXPECT_EQ(MatmulCpu(a, nullptr), KernelStatus::kInvalidArgument);  // 33 not a block multiple
  a.in = 32;
  a.w_row_bytes = 10;
  EXPECT_EQ(MatmulCpu(a, nullptr), KernelStatus::kInvalidArgument);  // row stride too small
  a.w_row_bytes = 34;
  a.type = GgmlType::kI32;
  EXPECT_EQ(MatmulCpu(a, nullptr), KernelStatus::kUnsupportedType);
}

}  // namespace
}  // namespace stepserve::kernels
