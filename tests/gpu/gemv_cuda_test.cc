// GemvCuda against the CPU reference (DequantizeRow + double dot) on fresh random valid blocks.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine/quant/ggml_type.h"
#include "engine/quant/quant.h"
#include "gtest/gtest.h"
#include "kernels/common/cuda_check.h"
#include "kernels/matmul/matmul_cuda.h"

namespace stepserve::kernels {
namespace {

// Float accumulation over `in` <= 4096 terms in a different order than the double reference:
// observed errors are ~1e-7; the bound leaves room without hiding an indexing error (which gives
// errors of order 1).
constexpr double kMaxRelError = 2e-5;

int64_t PaddedRowBytes(GgmlType type, int64_t in) { return (RowBytes(type, in) + 15) / 16 * 16; }

// Device buffer freed on scope exit.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&ptr, bytes) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};

TEST(GemvCudaValidateTest, RejectsBadArguments) {
  // Host-side checks only: runs without a GPU.
  alignas(16) static uint8_t w[4096];
  alignas(16) static float x[512], y[64];
  GemvCudaArgs a{.type = GgmlType::kQ4_K,
                 .w = w,
                 .w_row_bytes = 144,
                 .in = 256,
                 .out = 8,
                 .x = x,
                 .x_stride = 256,
                 .rows = 1,
                 .y = y,
                 .y_stride = 8};
  EXPECT_EQ(ValidateGemvCuda(a), KernelStatus::kOk);
  GemvCudaArgs b = a;
  b.type = GgmlType::kQ3_K;
  EXPECT_EQ(ValidateGemvCuda(b), KernelStatus::kUnsupportedType);
  b = a;
  b.w_row_bytes = 136;  // below RowBytes
  EXPECT_EQ(ValidateGemvCuda(b), KernelStatus::kInvalidArgument);
  b = a;
  b.type = GgmlType::kIQ4_XS;
  b.w_row_bytes = 136;  // enough bytes, but not a multiple of 16
  EXPECT_EQ(ValidateGemvCuda(b), KernelStatus::kInvalidArgument);
  b = a;
  b.w = w + 8;  // misaligned weights
  EXPECT_EQ(ValidateGemvCuda(b), KernelStatus::kInvalidArgument);
  b = a;
  b.x_stride = 258;  // X rows not float4-aligned
  EXPECT_EQ(ValidateGemvCuda(b), KernelStatus::kInvalidArgument);
  b = a;
  b.rows = kGemvCudaMaxRows + 1;
  EXPECT_EQ(ValidateGemvCuda(b), KernelStatus::kInvalidArgument);
  b = a;
  b.in = 128;  // not a multiple of the Q4_K block
  EXPECT_EQ(ValidateGemvCuda(b), KernelStatus::kInvalidArgument);
  b = a;
  b.y_stride = 7;
  EXPECT_EQ(ValidateGemvCuda(b), KernelStatus::kInvalidArgument);
}

using Case = std::tuple<GgmlType, std::pair<int64_t, int64_t>, int64_t>;  // type, {out,in}, rows

class GemvCudaTest : public ::testing::TestWithParam<Case> {};

TEST_P(GemvCudaTest, MatchesCpuReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const auto [type, shape, rows] = GetParam();
  const auto [out, in] = shape;
  const int64_t row_bytes = PaddedRowBytes(type, in);
  const int64_t nb = in / TypeInfo(type).block_elems;
  const int64_t x_stride = in + 4, y_stride = out + 3;
  std::random_device rd;  // fresh inputs every run: the kernel must be right on any valid input
  const uint64_t seed = (uint64_t{rd()} << 32) | rd();
  SCOPED_TRACE("seed " + std::to_string(seed));

  std::vector<uint8_t> w(out * row_bytes, 0xA5);  // padding bytes hold garbage on purpose
  for (int64_t o = 0; o < out; ++o) {
    ASSERT_TRUE(quant::FillRandomBlocks(type, w.data() + o * row_bytes, nb, seed + o, 1.0f).ok());
  }
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(rows * x_stride);
  for (float& v : x) v = normal(rng);

  // Reference: exact dequantized weights, double accumulation.
  std::vector<double> ref(rows * out);
  std::vector<float> deq(in);
  for (int64_t o = 0; o < out; ++o) {
    ASSERT_TRUE(quant::DequantizeRow(type, w.data() + o * row_bytes, deq.data(), in).ok());
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t k = 0; k < in; ++k) s += double{deq[k]} * x[r * x_stride + k];
      ref[r * out + o] = s;
    }
  }

  DeviceBuffer dw(w.size()), dx(x.size() * 4), dy(rows * y_stride * 4);
  ASSERT_NE(dw.ptr, nullptr);
  ASSERT_NE(dx.ptr, nullptr);
  ASSERT_NE(dy.ptr, nullptr);
  ASSERT_EQ(cudaMemcpy(dw.ptr, w.data(), w.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx.ptr, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dy.ptr, 0xFF, rows * y_stride * 4), cudaSuccess);  // NaN poison

  GemvCudaArgs args{.type = type,
                    .w = dw.ptr,
                    .w_row_bytes = row_bytes,
                    .in = in,
                    .out = out,
                    .x = static_cast<float*>(dx.ptr),
                    .x_stride = x_stride,
                    .rows = rows,
                    .y = static_cast<float*>(dy.ptr),
                    .y_stride = y_stride};
  ASSERT_EQ(GemvCuda(args, nullptr), KernelStatus::kOk);
  const cudaError_t err = cudaDeviceSynchronize();
  ASSERT_EQ(err, cudaSuccess) << CudaErrorText("GemvCuda", err);
  std::vector<float> y(rows * y_stride);
  ASSERT_EQ(cudaMemcpy(y.data(), dy.ptr, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);

  double diff2 = 0, ref2 = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      const float v = y[r * y_stride + o];
      ASSERT_TRUE(std::isfinite(v)) << "y[" << r << "][" << o << "] not written";
      const double d = v - ref[r * out + o];
      diff2 += d * d;
      ref2 += ref[r * out + o] * ref[r * out + o];
    }
    for (int64_t o = out; o < y_stride; ++o) {
      uint32_t bits;
      std::memcpy(&bits, &y[r * y_stride + o], 4);
      ASSERT_EQ(bits, 0xFFFFFFFFu) << "write past out in row " << r;
    }
  }
  const double rel = std::sqrt(diff2 / ref2);
  RecordProperty("rel_error", std::to_string(rel));
  EXPECT_LE(rel, kMaxRelError) << GgmlTypeName(type) << " out " << out << " in " << in << " rows "
                               << rows;
  std::printf("[ rel ] %s out=%lld in=%lld rows=%lld rel_error=%.3g\n",
              std::string(GgmlTypeName(type)).c_str(), static_cast<long long>(out),
              static_cast<long long>(in), static_cast<long long>(rows), rel);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvCudaTest,
                         ::testing::Combine(::testing::Values(GgmlType::kQ8_0, GgmlType::kQ4_K,
                                                              GgmlType::kQ6_K, GgmlType::kIQ4_XS),
                                            ::testing::Values(std::pair<int64_t, int64_t>{33, 256},
                                                              std::pair<int64_t, int64_t>{33, 4096},
                                                              std::pair<int64_t, int64_t>{4095,
                                                                                          768}),
                                            ::testing::Values(1, 3, 8, 16)));

}  // namespace
}  // namespace stepserve::kernels
