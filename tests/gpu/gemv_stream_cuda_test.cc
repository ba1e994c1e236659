// The streamed one-row GEMV (bulk copies through shared memory, kernels/matmul/gemv_stream_cuda.cu)
// on fresh random blocks: against the CPU (DequantizeRow + double dot with the F32 activations,
// bounded by the int8 activation rounding) and against the warp-per-row kernel it replaces
// (SetGemvCudaStreamMode), which computes the same per-lane sums (in another order on short
// rows). Shapes
// make each CTA take more units than its ring has stages (the barrier phases wrap) and end in a
// partial stage; the indexed (MoE) mode mixes valid and out-of-range matrix ids.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/quant/ggml_type.h"
#include "engine/quant/quant.h"
#include "gtest/gtest.h"
#include "kernels/common/cuda_check.h"
#include "kernels/matmul/matmul_cuda.h"
#include "tests/gpu/cuda_test_util.h"
#include "tests/gpu/poisoned_output.h"

namespace stepserve::kernels {
namespace {

// int8 activations vs the exact F32 product: ~5e-3 on normal data (matmul_cuda.h); an indexing
// error gives order 1.
constexpr double kMaxRelErrorVsF32 = 3e-2;
// Streamed vs warp-per-row: the same per-lane sums in the same order (only the compiler's
// contraction of the last multiply-add could differ, ~1e-7), except on short rows (fewer blocks
// than two warp steps, the 1280-wide expert-down row of the 4-bit types), where the warp-per-row
// kernel gives each lane group a row of its own and so adds the F32 partials in another order:
// ~1e-7 relative per add over <= 40 partials.
constexpr double kMaxRelErrorVsWarpRows = 1e-5;

using testing::DeviceBuffer;
using testing::PaddedRowBytes;
using testing::RunPoisonedRows;

double RelError(const std::vector<double>& a, const std::vector<double>& b) {
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff2 += (a[i] - b[i]) * (a[i] - b[i]);
    ref2 += b[i] * b[i];
  }
  return ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
}

// `n` matrices of `out` x `in` random blocks, rows padded to 16 bytes with garbage.
std::vector<uint8_t> RandomMatrices(GgmlType type, int64_t n, int64_t out, int64_t in,
                                    uint64_t seed) {
  const int64_t row_bytes = PaddedRowBytes(type, in);
  const int64_t nb = in / TypeInfo(type).block_elems;
  std::vector<uint8_t> w(n * out * row_bytes, 0xA5);
  for (int64_t r = 0; r < n * out; ++r) {
    EXPECT_TRUE(quant::FillRandomBlocks(type, w.data() + r * row_bytes, nb, seed + r,
                                        1.0f / std::sqrt(static_cast<float>(in)))
                    .ok());
  }
  return w;
}

// y[o] = sum_k W_row_o[k] * x[k] in double over the dequantized weights.
std::vector<double> RefProduct(GgmlType type, const uint8_t* w, int64_t out, int64_t in,
                               const float* x) {
  const int64_t row_bytes = PaddedRowBytes(type, in);
  std::vector<double> y(out);
  std::vector<float> deq(in);
  for (int64_t o = 0; o < out; ++o) {
    EXPECT_TRUE(quant::DequantizeRow(type, w + o * row_bytes, deq.data(), in).ok());
    double s = 0;
    for (int64_t k = 0; k < in; ++k) s += double{deq[k]} * x[k];
    y[o] = s;
  }
  return y;
}

// Runs `launch` streamed (kAlways) and with the warp-per-row kernel (kNever); restores the mode.
template <class Launch>
void RunBothKernels(Launch launch, void* dy, int64_t rows, int64_t out, int64_t y_stride,
                    std::vector<double>* streamed, std::vector<double>* warp_rows) {
  const GemvStreamMode was = SetGemvCudaStreamMode(GemvStreamMode::kAlways);
  RunPoisonedRows("streamed GEMV", launch, dy, rows, out, y_stride, streamed);
  SetGemvCudaStreamMode(GemvStreamMode::kNever);
  if (!::testing::Test::HasFatalFailure()) {
    RunPoisonedRows("warp-per-row GEMV", launch, dy, rows, out, y_stride, warp_rows);
  }
  SetGemvCudaStreamMode(was);
}

struct Shape {
  int64_t out, in;
};

class GemvStreamTest : public ::testing::TestWithParam<std::tuple<GgmlType, Shape>> {};

TEST_P(GemvStreamTest, OneRowMatchesCpuAndWarpRows) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const auto [type, shape] = GetParam();
  const auto [out, in] = shape;
  std::random_device rd;
  const uint64_t seed = (uint64_t{rd()} << 32) | rd();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<uint8_t> w = RandomMatrices(type, 1, out, in, seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(in);
  for (float& v : x) v = normal(rng);
  const std::vector<double> ref = RefProduct(type, w.data(), out, in, x.data());

  const int64_t y_stride = out + 5, scratch_bytes = GemvCudaScratchBytes(in, 1);
  DeviceBuffer dw(w.size()), dx(x.size() * 4), dy(y_stride * 4), ds(scratch_bytes);
  ASSERT_TRUE(dw.ptr && dx.ptr && dy.ptr && ds.ptr);
  ASSERT_EQ(cudaMemcpy(dw.ptr, w.data(), w.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx.ptr, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  const GemvCudaArgs args{.type = type,
                          .w = dw.ptr,
                          .w_row_bytes = PaddedRowBytes(type, in),
                          .in = in,
                          .out = out,
                          .x = static_cast<float*>(dx.ptr),
                          .x_stride = in,
                          .rows = 1,
                          .y = static_cast<float*>(dy.ptr),
                          .y_stride = y_stride,
                          .scratch = ds.ptr,
                          .scratch_bytes = scratch_bytes};
  std::vector<double> streamed, warp_rows;
  ASSERT_NO_FATAL_FAILURE(RunBothKernels([&] { return GemvCuda(args, nullptr); }, dy.ptr, 1, out,
                                         y_stride, &streamed, &warp_rows));
  const std::string what =
      std::string(GgmlTypeName(type)) + " out " + std::to_string(out) + " in " + std::to_string(in);
  const double vs_f32 = RelError(streamed, ref), vs_warp = RelError(streamed, warp_rows);
  EXPECT_LE(vs_f32, kMaxRelErrorVsF32) << what;
  EXPECT_LE(vs_warp, kMaxRelErrorVsWarpRows) << what;
  std::printf("[ rel ] %s streamed vs f32 %.3g, vs warp-per-row %.3g\n", what.c_str(), vs_f32,
              vs_warp);
}

// {33, 4096}: one partial stage; {12289, 8192}: ~12 units per CTA through a ring of 2-5 stages
// (the barrier phases wrap several times), a 1-row last stage; {4095, 1280}: the expert-down row.
INSTANTIATE_TEST_SUITE_P(
    Shapes, GemvStreamTest,
    ::testing::Combine(::testing::Values(GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K,
                                         GgmlType::kQ6_K, GgmlType::kIQ4_XS),
                       ::testing::Values(Shape{33, 4096}, Shape{12289, 8192}, Shape{4095, 1280})));

TEST(GemvStreamIndexedTest, MixedIdsMatchCpuAndWarpRows) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  for (const GgmlType type : {GgmlType::kIQ4_XS, GgmlType::kQ6_K}) {
    const int64_t n_matrices = 3, out = 1283, in = 4096, x_group_div = 2;
    const std::vector<int32_t> ids = {2, -1, 0, 7, 1, 2, 0};  // -1 and 7: zero rows
    const int64_t groups = static_cast<int64_t>(ids.size());
    const int64_t x_rows = (groups + x_group_div - 1) / x_group_div;
    const int64_t row_bytes = PaddedRowBytes(type, in), matrix_bytes = out * row_bytes;
    std::random_device rd;
    const uint64_t seed = (uint64_t{rd()} << 32) | rd();
    SCOPED_TRACE("seed " + std::to_string(seed));
    const std::vector<uint8_t> w = RandomMatrices(type, n_matrices, out, in, seed);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> x(x_rows * in);
    for (float& v : x) v = normal(rng);
    std::vector<double> ref(groups * out, 0.0);
    for (int64_t g = 0; g < groups; ++g) {
      if (ids[g] < 0 || ids[g] >= n_matrices) continue;
      const std::vector<double> y = RefProduct(type, w.data() + ids[g] * matrix_bytes, out, in,
                                               x.data() + (g / x_group_div) * in);
      std::copy(y.begin(), y.end(), ref.begin() + g * out);
    }
    const int64_t y_stride = out + 3, scratch_bytes = GemvCudaScratchBytes(in, x_rows);
    DeviceBuffer dw(w.size()), dx(x.size() * 4), dy(groups * y_stride * 4), ds(scratch_bytes),
        dids(ids.size() * 4);
    ASSERT_TRUE(dw.ptr && dx.ptr && dy.ptr && ds.ptr && dids.ptr);
    ASSERT_EQ(cudaMemcpy(dw.ptr, w.data(), w.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dx.ptr, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dids.ptr, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice),
              cudaSuccess);
    const GemvIndexedCudaArgs args{.type = type,
                                   .w = dw.ptr,
                                   .w_row_bytes = row_bytes,
                                   .w_matrix_bytes = matrix_bytes,
                                   .n_matrices = n_matrices,
                                   .in = in,
                                   .out = out,
                                   .ids = static_cast<const int32_t*>(dids.ptr),
                                   .groups = groups,
                                   .x_group_div = x_group_div,
                                   .x = static_cast<const float*>(dx.ptr),
                                   .x_stride = in,
                                   .x_rows = x_rows,
                                   .y = static_cast<float*>(dy.ptr),
                                   .y_stride = y_stride,
                                   .scratch = ds.ptr,
                                   .scratch_bytes = scratch_bytes};
    std::vector<double> streamed, warp_rows;
    ASSERT_NO_FATAL_FAILURE(RunBothKernels([&] { return GemvIndexedCuda(args, nullptr); }, dy.ptr,
                                           groups, out, y_stride, &streamed, &warp_rows));
    for (int64_t g = 0; g < groups; ++g) {
      if (ids[g] >= 0 && ids[g] < n_matrices) continue;
      for (int64_t o = 0; o < out; ++o) {
        ASSERT_EQ(streamed[g * out + o], 0.0) << "group " << g << " (id " << ids[g] << ")";
      }
    }
    const double vs_f32 = RelError(streamed, ref), vs_warp = RelError(streamed, warp_rows);
    EXPECT_LE(vs_f32, kMaxRelErrorVsF32) << GgmlTypeName(type);
    EXPECT_LE(vs_warp, kMaxRelErrorVsWarpRows) << GgmlTypeName(type);
    std::printf("[ rel ] indexed %s streamed vs f32 %.3g, vs warp-per-row %.3g\n",
                std::string(GgmlTypeName(type)).c_str(), vs_f32, vs_warp);
  }
}

}  // namespace
}  // namespace stepserve::kernels
