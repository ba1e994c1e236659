// DequantRowsCuda on the device against engine/quant's DequantizeRow: F16 output must be that
// value rounded to nearest even, bit for bit, and F32 output the value itself. IQ4_XS to F16 has
// its own kernel (dequant_cuda.cu) while its alignment holds, and the generic kernel otherwise (an
// output stride that breaks 16-byte rows, or STEPSERVE_DEQUANT_IQ4XS_FAST=0); every quantized type
// also goes through the staged kernel with STEPSERVE_DEQUANT_STAGED=1 (run the test with it). All
// on fresh random blocks: a row range from an offset, gathered ids with a bad id (a row of NaN),
// odd row counts, rows that end mid-chunk, padded output rows. Outputs are poisoned with 0xFF
// first, and the padding past each row's `cols` must stay poisoned.
#include "kernels/matmul/dequant_cuda.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/quant/float16.h"
#include "engine/quant/ggml_type.h"
#include "engine/quant/quant.h"
#include "gtest/gtest.h"
#include "kernels/common/cuda_check.h"
#include "tests/gpu/cuda_test_util.h"

namespace stepserve::kernels {
namespace {

using testing::DeviceBuffer;

struct Case {
  GgmlType type;
  int64_t cols, table_rows, first_row, rows, out_stride;
  bool gather, f16;
};

std::string Name(const Case& c) {
  return std::string(TypeInfo(c.type).name) + " cols " + std::to_string(c.cols) + " rows " +
         std::to_string(c.rows) + " stride " + std::to_string(c.out_stride) +
         (c.gather ? " gathered" : " range") + (c.f16 ? " f16" : " f32");
}

void RunCase(const Case& c, uint64_t seed) {
  SCOPED_TRACE(Name(c));
  const int64_t row_bytes = RowBytes(c.type, c.cols);
  std::vector<uint8_t> w(static_cast<size_t>(row_bytes * c.table_rows));
  const int64_t blocks = c.table_rows * (c.cols / TypeInfo(c.type).block_elems);
  ASSERT_TRUE(quant::FillRandomBlocks(c.type, w.data(), blocks, seed, 1.0f).ok());
  // Gathered ids walk the table backwards in steps of 3; the third is out of range.
  std::vector<int32_t> ids(static_cast<size_t>(c.rows));
  for (int64_t r = 0; r < c.rows; ++r) {
    const int64_t id = ((c.table_rows - 1 - 3 * r) % c.table_rows + c.table_rows) % c.table_rows;
    ids[r] = static_cast<int32_t>(r == 2 ? c.table_rows : id);
  }
  const size_t elem = c.f16 ? 2 : 4;
  const size_t out_bytes = static_cast<size_t>(c.rows * c.out_stride) * elem;
  DeviceBuffer dw(w.size()), dids(ids.size() * sizeof(int32_t)), dout(out_bytes);
  ASSERT_NE(dw.ptr, nullptr);
  ASSERT_NE(dout.ptr, nullptr);
  ASSERT_EQ(cudaMemcpy(dw.ptr, w.data(), w.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dids.ptr, ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemset(dout.ptr, 0xFF, out_bytes), cudaSuccess);
  DequantRowsArgs a;
  a.type = c.type;
  a.w = dw.ptr;
  a.w_row_bytes = row_bytes;
  a.cols = c.cols;
  a.table_rows = c.table_rows;
  a.first_row = c.first_row;
  a.row_ids = c.gather ? static_cast<const int32_t*>(dids.ptr) : nullptr;
  a.rows = c.rows;
  a.output = c.f16 ? DequantOutput::kF16 : DequantOutput::kF32;
  a.out = dout.ptr;
  a.out_stride = c.out_stride;
  ASSERT_EQ(DequantRowsCuda(a, nullptr), KernelStatus::kOk);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> got(out_bytes);
  ASSERT_EQ(cudaMemcpy(got.data(), dout.ptr, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);

  std::vector<float> ref(static_cast<size_t>(c.cols));
  int64_t mismatches = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    const int64_t src = c.gather ? ids[r] : c.first_row + r;
    const bool bad = src < 0 || src >= c.table_rows;
    if (!bad) {
      ASSERT_TRUE(
          quant::DequantizeRow(c.type, w.data() + src * row_bytes, ref.data(), c.cols).ok());
    }
    for (int64_t e = 0; e < c.out_stride; ++e) {
      const uint8_t* g = got.data() + static_cast<size_t>(r * c.out_stride + e) * elem;
      uint32_t bits = 0;
      std::memcpy(&bits, g, elem);
      if (e >= c.cols) {  // padding: still the poison
        if (bits != (c.f16 ? 0xFFFFu : 0xFFFFFFFFu)) ++mismatches;
        continue;
      }
      if (bad) {  // a row of quiet NaN
        const bool nan = c.f16 ? (bits & 0x7C00u) == 0x7C00u && (bits & 0x3FFu) != 0
                               : (bits & 0x7F800000u) == 0x7F800000u && (bits & 0x7FFFFFu) != 0;
        if (!nan) ++mismatches;
        continue;
      }
      uint32_t want = 0;
      if (c.f16) {
        want = F32ToF16(ref[e]);
      } else {
        std::memcpy(&want, &ref[e], sizeof(want));
      }
      if (bits != want && mismatches++ < 5) {
        ADD_FAILURE() << "row " << r << " (source " << src << ") element " << e << ": bits 0x"
                      << std::hex << bits << ", want 0x" << want << std::dec;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(DequantCudaTest, RowsMatchDequantizeRowBitForBit) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  // IQ4_XS to F16 with aligned rows takes the sub-block kernel; stride 4100 (8200-byte rows, not
  // a multiple of 16) the generic one. The other types and F32 output: the generic kernel.
  const Case cases[] = {
      {GgmlType::kIQ4_XS, 4096, 300, 37, 201, 4096, false, true},
      {GgmlType::kIQ4_XS, 4096, 300, 0, 300, 4104, false, true},
      {GgmlType::kIQ4_XS, 1280, 77, 0, 53, 1288, true, true},
      {GgmlType::kIQ4_XS, 256, 5, 1, 3, 256, false, true},
      {GgmlType::kIQ4_XS, 12288, 40, 3, 17, 12288, true, true},
      {GgmlType::kIQ4_XS, 4096, 50, 5, 31, 4100, false, true},
      {GgmlType::kIQ4_XS, 4096, 50, 5, 31, 4096, true, false},
      {GgmlType::kQ4_K, 4096, 60, 7, 29, 4104, false, true},
      {GgmlType::kQ6_K, 1280, 60, 0, 41, 1280, true, true},
      {GgmlType::kQ5_K, 4096, 30, 2, 9, 4096, false, false},
      // Row lengths that end mid-chunk for the staged kernel (2048 values per CTA).
      {GgmlType::kQ8_0, 4128, 20, 1, 13, 4128, false, true},
      {GgmlType::kIQ4_NL, 2080, 20, 0, 11, 2080, true, true},
      {GgmlType::kQ2_K, 2304, 20, 3, 7, 2304, false, true},
      {GgmlType::kQ3_K, 4096, 12, 0, 5, 4096, true, false},
      {GgmlType::kIQ2_XXS, 2304, 12, 2, 5, 2312, false, true},
      {GgmlType::kIQ2_XS, 768, 12, 0, 9, 768, true, true},
      {GgmlType::kIQ2_S, 512, 12, 1, 6, 512, false, true},
      {GgmlType::kIQ3_XXS, 256, 12, 0, 12, 256, false, false},
      {GgmlType::kIQ3_S, 1280, 12, 4, 8, 1280, true, true},
      {GgmlType::kQ6_K, 2304, 20, 0, 7, 2304, false, true},
  };
  uint64_t seed = 11;
  for (const Case& c : cases) RunCase(c, seed++);
}

}  // namespace
}  // namespace stepserve::kernels
