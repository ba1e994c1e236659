// The cluster F32 GEMV of 2-16 activation rows (kernels/matmul/gemv_f32_rows_cuda.cu, the MoE
// router at 2-16 streams) on fresh random data: against a double-precision CPU product and
// against GemvGenericCuda's warp-split kernel, into NaN-poisoned outputs with padded strides.
// Shapes cover the router (288 x 4096: 8 cluster ranks of one staged piece each), a slice that
// is not a multiple of the piece (K = 1028: 3 ranks), two pieces a rank (K = 8192), one rank
// (K = 12) and a last row block that is partly past `out`; rows cover the 4 / 8 / 16 buckets and
// counts between them. The kernel adds the ranks in a fixed order: two runs agree bit for bit.
#include "kernels/matmul/gemv_f32_rows_cuda.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/cuda_check.h"
#include "kernels/matmul/gemm_cuda.h"
#include "tests/gpu/cuda_test_util.h"
#include "tests/gpu/poisoned_output.h"

namespace stepserve::kernels {
namespace {

using testing::DeviceBuffer;
using testing::RunPoisonedRows;

// F32 products over K <= 8192 of values ~1/sqrt(K): each F32 add rounds at 6e-8 relative, so the
// error against the double sum stays near 1e-6; a dropped slice or a wrong row is order 1.
constexpr double kMaxRelErrorVsDouble = 1e-5;
// The warp-split kernel adds the same products in another order.
constexpr double kMaxRelErrorVsGeneric = 2e-5;

double RelError(const std::vector<float>& a, const std::vector<double>& ref) {
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff2 += (a[i] - ref[i]) * (a[i] - ref[i]);
    ref2 += ref[i] * ref[i];
  }
  return ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
}

struct Case {
  int64_t out, in, rows;
};

class GemvF32RowsTest : public ::testing::TestWithParam<Case> {};

TEST_P(GemvF32RowsTest, MatchesDoubleAndGeneric) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  // GemvGenericCuda's own warp-split kernel is the second reference: the switch (read once, at
  // GemvGenericCuda's first call) off for this process.
  setenv("STEPSERVE_GEMV_F32_ROWS", "0", /*overwrite=*/1);
  const Case c = GetParam();
  // Padded strides (as the backend's views may have): weight rows, x rows and y rows.
  const int64_t w_row_floats = c.in + 4;
  const int64_t x_stride = c.in + 8;
  const int64_t y_stride = c.out + 3;
  std::mt19937_64 rng(c.out * 7919 + c.in * 31 + c.rows);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(c.out * w_row_floats), x(c.rows * x_stride);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.in));
  for (float& v : w) v = normal(rng) * scale;
  for (float& v : x) v = normal(rng);
  std::vector<double> ref(c.rows * c.out);
  for (int64_t t = 0; t < c.rows; ++t) {
    for (int64_t o = 0; o < c.out; ++o) {
      double s = 0;
      for (int64_t k = 0; k < c.in; ++k) s += double{w[o * w_row_floats + k]} * x[t * x_stride + k];
      ref[t * c.out + o] = s;
    }
  }
  DeviceBuffer dw(w.size() * 4), dx(x.size() * 4), dy(c.rows * y_stride * 4);
  ASSERT_NE(dw.ptr, nullptr);
  ASSERT_NE(dx.ptr, nullptr);
  ASSERT_NE(dy.ptr, nullptr);
  ASSERT_EQ(cudaMemcpy(dw.ptr, w.data(), w.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx.ptr, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  MatmulCudaArgs a;
  a.type = GgmlType::kF32;
  a.w = dw.ptr;
  a.w_row_bytes = w_row_floats * 4;
  a.in = c.in;
  a.out = c.out;
  a.x = static_cast<const float*>(dx.ptr);
  a.x_stride = x_stride;
  a.rows = c.rows;
  a.y = static_cast<float*>(dy.ptr);
  a.y_stride = y_stride;
  ASSERT_TRUE(GemvF32RowsTakes(a));
  float* y = static_cast<float*>(dy.ptr);
  std::vector<float> rows_out, rows_again, generic_out;
  RunPoisonedRows(
      "F32 rows GEMV", [&] { return GemvF32RowsCuda(a, nullptr); }, y, c.rows, c.out, y_stride,
      &rows_out);
  if (HasFatalFailure()) return;
  RunPoisonedRows(
      "F32 rows GEMV", [&] { return GemvF32RowsCuda(a, nullptr); }, y, c.rows, c.out, y_stride,
      &rows_again);
  if (HasFatalFailure()) return;
  ASSERT_FALSE(GemvF32RowsEnabled()) << "the generic kernel must run its own path here";
  RunPoisonedRows(
      "generic GEMV", [&] { return GemvGenericCuda(a, nullptr); }, y, c.rows, c.out, y_stride,
      &generic_out);
  if (HasFatalFailure()) return;
  EXPECT_LT(RelError(rows_out, ref), kMaxRelErrorVsDouble);
  std::vector<double> generic_ref(generic_out.begin(), generic_out.end());
  EXPECT_LT(RelError(rows_out, generic_ref), kMaxRelErrorVsGeneric);
  EXPECT_EQ(std::memcmp(rows_out.data(), rows_again.data(), rows_out.size() * 4), 0)
      << "two runs differ: the rank order of the sums is not fixed";
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvF32RowsTest,
                         ::testing::Values(Case{288, 4096, 2}, Case{288, 4096, 3},
                                           Case{288, 4096, 4}, Case{288, 4096, 7},
                                           Case{288, 4096, 8}, Case{288, 4096, 9},
                                           Case{288, 4096, 16}, Case{33, 1028, 5},
                                           Case{17, 8192, 16}, Case{1, 12, 2},
                                           Case{301, 4096, 13}));

TEST(GemvF32RowsTakesTest, DeclinesWhatItCannotRun) {
  float* fake = reinterpret_cast<float*>(uintptr_t{1} << 20);  // never dereferenced
  MatmulCudaArgs a;
  a.type = GgmlType::kF32;
  a.w = fake;
  a.w_row_bytes = 4096 * 4;
  a.in = 4096;
  a.out = 288;
  a.x = fake;
  a.x_stride = 4096;
  a.rows = 4;
  a.y = fake + (1 << 20);
  a.y_stride = 288;
  EXPECT_TRUE(GemvF32RowsTakes(a));
  MatmulCudaArgs one_row = a;
  one_row.rows = 1;
  EXPECT_FALSE(GemvF32RowsTakes(one_row));
  MatmulCudaArgs many = a;
  many.rows = kGemvGenericMaxRows + 1;
  EXPECT_FALSE(GemvF32RowsTakes(many));
  MatmulCudaArgs f16 = a;
  f16.type = GgmlType::kF16;
  f16.w_row_bytes = 4096 * 2;
  EXPECT_FALSE(GemvF32RowsTakes(f16));
  MatmulCudaArgs odd_stride = a;
  odd_stride.x_stride = 4098;
  EXPECT_FALSE(GemvF32RowsTakes(odd_stride));
  MatmulCudaArgs unaligned = a;
  unaligned.x = fake + 1;
  EXPECT_FALSE(GemvF32RowsTakes(unaligned));
  EXPECT_EQ(GemvF32RowsCuda(one_row, nullptr), KernelStatus::kInvalidArgument);
}

}  // namespace
}  // namespace stepserve::kernels
