// GemvCuda against the CPU reference (DequantizeRow + double dot) on fresh random valid blocks, in
// both activation modes. kQ8 is checked three ways: the quantized activations read back from the
// scratch equal a host re-implementation of the documented rounding byte for byte; y matches the
// double-precision dot with those quantized activations to F32 accumulation error; y is close to
// the exact F32 result (the activation rounding bound); and a second call with x_prequantized
// reproduces y bit for bit.
#include <cuda_runtime_api.h>

#include <algorithm>
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
#include "tests/gpu/cuda_test_util.h"

namespace stepserve::kernels {
namespace {

// Float accumulation over `in` <= 4096 terms in a different order than the double reference:
// observed errors are ~1e-7; the bound leaves room without hiding an indexing error (which gives
// errors of order 1). Used for kF32 vs the exact reference and kQ8 vs the quantized-X reference.
constexpr double kMaxRelError = 2e-5;
// kQ8 vs the exact F32 result: rounding x to 1/254 of its block's max|x| gives errors of ~0.3% of
// |x| per value (uniform rounding, std d/sqrt(12)); relative to y that is ~5e-3 on normal data.
// 3e-2 leaves room for small outputs (33 rows) while an indexing or scale error (order 1) fails.
constexpr double kMaxRelErrorQ8VsF32 = 3e-2;

// Host copy of the documented kQ8 activation quantization (matmul_cuda.h): per 32 values
// d = max|x| / 127, q = round-half-even(x / d), sum = d * sum(q); F32 arithmetic throughout.
struct HostQ8 {
  std::vector<int8_t> q;    // rows x in
  std::vector<float> d, s;  // rows x in/32
};

HostQ8 QuantizeHost(const std::vector<float>& x, int64_t rows, int64_t in, int64_t x_stride) {
  HostQ8 h;
  h.q.resize(rows * in);
  h.d.resize(rows * in / 32);
  h.s.resize(rows * in / 32);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < in / 32; ++b) {
      const float* v = &x[r * x_stride + 32 * b];
      float amax = 0.f;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[i]));
      const float d = amax / 127.0f;
      int sum = 0;
      for (int i = 0; i < 32; ++i) {
        const int q = d > 0.f ? static_cast<int>(std::nearbyint(v[i] / d)) : 0;
        h.q[r * in + 32 * b + i] = static_cast<int8_t>(q);
        sum += q;
      }
      h.d[r * (in / 32) + b] = d;
      h.s[r * (in / 32) + b] = d * static_cast<float>(sum);
    }
  }
  return h;
}

using testing::DeviceBuffer;
using testing::PaddedRowBytes;

TEST(Q8ScratchPositionTest, EachTypeStoresABlockAsAPermutation) {
  for (GgmlType type :
       {GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kIQ4_XS}) {
    std::vector<int> seen(32, 0);
    for (int e = 0; e < 32; ++e) {
      const int at = Q8ScratchPosition(type, e);
      ASSERT_GE(at, 0);
      ASSERT_LT(at, 32);
      ++seen[at];
    }
    for (int n : seen) EXPECT_EQ(n, 1) << GgmlTypeName(type);
  }
  // IQ4_XS: word 2i + j/2 of the block pairs element 4i + j (even byte) with 16 + 4i + j (odd).
  EXPECT_EQ(Q8ScratchPosition(GgmlType::kIQ4_XS, 0), 0);
  EXPECT_EQ(Q8ScratchPosition(GgmlType::kIQ4_XS, 16), 1);
  EXPECT_EQ(Q8ScratchPosition(GgmlType::kIQ4_XS, 5), 10);
  EXPECT_EQ(Q8ScratchPosition(GgmlType::kIQ4_XS, 31), 31);
  EXPECT_TRUE(SameQ8ScratchOrder(GgmlType::kQ4_K, GgmlType::kQ6_K));
  EXPECT_FALSE(SameQ8ScratchOrder(GgmlType::kQ4_K, GgmlType::kIQ4_XS));
}

TEST(GemvCudaValidateTest, RejectsBadArguments) {
  // Host-side checks only: runs without a GPU.
  alignas(16) static uint8_t w[4096];
  alignas(16) static float x[512], y[64], scratch[256];
  GemvCudaArgs a{.type = GgmlType::kQ4_K,
                 .w = w,
                 .w_row_bytes = 144,
                 .in = 256,
                 .out = 8,
                 .x = x,
                 .x_stride = 256,
                 .rows = 1,
                 .y = y,
                 .y_stride = 8,
                 .scratch = scratch,
                 .scratch_bytes = sizeof(scratch)};
  EXPECT_EQ(ValidateGemvCuda(a), KernelStatus::kOk);
  GemvCudaArgs b = a;
  b.scratch = nullptr;  // kQ8 needs scratch
  EXPECT_EQ(ValidateGemvCuda(b), KernelStatus::kInvalidArgument);
  b = a;
  b.scratch_bytes = GemvCudaScratchBytes(256, 1) - 1;
  EXPECT_EQ(ValidateGemvCuda(b), KernelStatus::kInvalidArgument);
  b = a;
  b.rows = 2;  // the same scratch is too small for two rows (256 + 8 * 8 bytes each)
  b.scratch_bytes = GemvCudaScratchBytes(256, 1);
  EXPECT_EQ(ValidateGemvCuda(b), KernelStatus::kInvalidArgument);
  b = a;
  b.scratch = reinterpret_cast<uint8_t*>(scratch) + 4;  // misaligned scratch
  b.scratch_bytes = 512;
  EXPECT_EQ(ValidateGemvCuda(b), KernelStatus::kInvalidArgument);
  b = a;
  b.x = nullptr;  // X needed unless prequantized
  EXPECT_EQ(ValidateGemvCuda(b), KernelStatus::kInvalidArgument);
  b.x_prequantized = true;
  EXPECT_EQ(ValidateGemvCuda(b), KernelStatus::kOk);
  b = a;
  b.activations = GemvCudaActivations::kF32;  // F32 mode needs no scratch
  b.scratch = nullptr;
  EXPECT_EQ(ValidateGemvCuda(b), KernelStatus::kOk);
  b.activations = static_cast<GemvCudaActivations>(7);
  EXPECT_EQ(ValidateGemvCuda(b), KernelStatus::kInvalidArgument);
  EXPECT_EQ(GemvCudaScratchBytes(256, 1), 256 + 8 * 8);
  EXPECT_EQ(GemvCudaScratchBytes(4096, 3), 3 * 4096 + 3 * 128 * 8);
  b = a;
  b.type = GgmlType::kQ4_0;  // no int8-activation piece (the 2-3 bit types: their own test below)
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

// Past 16 rows only IQ4_XS with int8 activations, up to the wide tensor-core GEMV's limit.
TEST(GemvCudaValidateTest, WideRowsOnlyForIq4XsWithTheWideMma) {
  const int64_t before = SetGemvCudaMmaWideMaxRows(0);  // clamped to 16: off
  EXPECT_EQ(GemvCudaMaxRows(GgmlType::kIQ4_XS, GemvCudaActivations::kQ8), kGemvCudaMaxRows);
  SetGemvCudaMmaWideMaxRows(32);
  EXPECT_EQ(GemvCudaMaxRows(GgmlType::kIQ4_XS, GemvCudaActivations::kQ8), 32);
  SetGemvCudaMmaWideMaxRows(1000);  // clamped to 32
  EXPECT_EQ(GemvCudaMaxRows(GgmlType::kIQ4_XS, GemvCudaActivations::kQ8), 32);
  EXPECT_EQ(GemvCudaMaxRows(GgmlType::kIQ4_XS, GemvCudaActivations::kF32), kGemvCudaMaxRows);
  EXPECT_EQ(GemvCudaMaxRows(GgmlType::kQ4_K, GemvCudaActivations::kQ8), kGemvCudaMaxRows);
  EXPECT_EQ(GemvCudaMaxRows(GgmlType::kQ8_0, GemvCudaActivations::kQ8), kGemvCudaMaxRows);
  alignas(16) static int dummy[64];
  GemvCudaArgs a{.type = GgmlType::kIQ4_XS,
                 .w = dummy,
                 .w_row_bytes = 144,
                 .in = 256,
                 .out = 4,
                 .x = reinterpret_cast<const float*>(dummy),
                 .x_stride = 256,
                 .rows = 32,
                 .y = reinterpret_cast<float*>(dummy),
                 .y_stride = 4,
                 .activations = GemvCudaActivations::kQ8,
                 .scratch = dummy,
                 .scratch_bytes = GemvCudaScratchBytes(256, 33)};
  EXPECT_EQ(ValidateGemvCuda(a), KernelStatus::kOk);
  a.rows = 33;
  EXPECT_EQ(ValidateGemvCuda(a), KernelStatus::kInvalidArgument);
  a.rows = 32;
  EXPECT_EQ(ValidateGemvCuda(a), KernelStatus::kOk);
  SetGemvCudaMmaWideMaxRows(16);
  a.rows = 17;
  EXPECT_EQ(ValidateGemvCuda(a), KernelStatus::kInvalidArgument);
  SetGemvCudaMmaWideMaxRows(before);
}

// type, {out, in}, rows, activations
using Case = std::tuple<GgmlType, std::pair<int64_t, int64_t>, int64_t, GemvCudaActivations>;

class GemvCudaTest : public ::testing::TestWithParam<Case> {};

// ||a - b|| / ||b|| over rows x out.
double RelError(const std::vector<double>& a, const std::vector<double>& b) {
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff2 += (a[i] - b[i]) * (a[i] - b[i]);
    ref2 += b[i] * b[i];
  }
  return std::sqrt(diff2 / ref2);
}

// Restores the wide tensor-core GEMV's limit when a case ends (cases past 16 rows set it to 32).
struct MmaWideScope {
  explicit MmaWideScope(int64_t max_rows) : before(SetGemvCudaMmaWideMaxRows(max_rows)) {}
  ~MmaWideScope() { SetGemvCudaMmaWideMaxRows(before); }
  int64_t before;
};

// Turns the low-bit types (GemvCudaSupports) on for a case and restores the setting after it.
struct LowBitScope {
  LowBitScope() : before(SetGemvCudaLowBitTypes(true)) {}
  ~LowBitScope() { SetGemvCudaLowBitTypes(before); }
  bool before;
};

// Sets the one-row IQ4_XS GEMV's whole-iteration form for a run and restores it after.
struct OneRowWholeScope {
  explicit OneRowWholeScope(bool on) : before(SetGemvCudaOneRowWhole(on)) {}
  ~OneRowWholeScope() { SetGemvCudaOneRowWhole(before); }
  bool before;
};

TEST_P(GemvCudaTest, MatchesCpuReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const auto [type, shape, rows, mode] = GetParam();
  const MmaWideScope wide(32);  // rows up to 16 never take the wide kernel
  const LowBitScope low_bit;
  const auto [out, in] = shape;
  const bool q8 = mode == GemvCudaActivations::kQ8;
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
  const HostQ8 hq = QuantizeHost(x, rows, in, x_stride);

  // References with the exact dequantized weights and double accumulation: against the F32
  // activations, and against the quantized ones (d * q).
  std::vector<double> ref(rows * out), ref_q8(rows * out);
  std::vector<float> deq(in);
  for (int64_t o = 0; o < out; ++o) {
    ASSERT_TRUE(quant::DequantizeRow(type, w.data() + o * row_bytes, deq.data(), in).ok());
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0, sq = 0;
      for (int64_t k = 0; k < in; ++k) {
        s += double{deq[k]} * x[r * x_stride + k];
        sq += double{deq[k]} * hq.d[r * (in / 32) + k / 32] * hq.q[r * in + k];
      }
      ref[r * out + o] = s;
      ref_q8[r * out + o] = sq;
    }
  }

  const int64_t scratch_bytes = GemvCudaScratchBytes(in, rows);
  DeviceBuffer dw(w.size()), dx(x.size() * 4), dy(rows * y_stride * 4), ds(scratch_bytes);
  ASSERT_NE(dw.ptr, nullptr);
  ASSERT_NE(dx.ptr, nullptr);
  ASSERT_NE(dy.ptr, nullptr);
  ASSERT_NE(ds.ptr, nullptr);
  ASSERT_EQ(cudaMemcpy(dw.ptr, w.data(), w.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx.ptr, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(ds.ptr, 0x5A, scratch_bytes), cudaSuccess);  // stale garbage

  GemvCudaArgs args{.type = type,
                    .w = dw.ptr,
                    .w_row_bytes = row_bytes,
                    .in = in,
                    .out = out,
                    .x = static_cast<float*>(dx.ptr),
                    .x_stride = x_stride,
                    .rows = rows,
                    .y = static_cast<float*>(dy.ptr),
                    .y_stride = y_stride,
                    .activations = mode,
                    .scratch = q8 ? ds.ptr : nullptr,
                    .scratch_bytes = q8 ? scratch_bytes : 0};
  // Runs the GEMV into a NaN-poisoned Y and returns rows x out (padding columns checked).
  auto run = [&](const GemvCudaArgs& a, std::vector<double>* result, std::vector<float>* raw) {
    ASSERT_EQ(cudaMemset(dy.ptr, 0xFF, rows * y_stride * 4), cudaSuccess);  // NaN poison
    ASSERT_EQ(GemvCuda(a, nullptr), KernelStatus::kOk);
    const cudaError_t err = cudaDeviceSynchronize();
    ASSERT_EQ(err, cudaSuccess) << CudaErrorText("GemvCuda", err);
    raw->resize(rows * y_stride);
    ASSERT_EQ(cudaMemcpy(raw->data(), dy.ptr, raw->size() * 4, cudaMemcpyDeviceToHost),
              cudaSuccess);
    result->resize(rows * out);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        const float v = (*raw)[r * y_stride + o];
        ASSERT_TRUE(std::isfinite(v)) << "y[" << r << "][" << o << "] not written";
        (*result)[r * out + o] = v;
      }
      for (int64_t o = out; o < y_stride; ++o) {
        uint32_t bits;
        std::memcpy(&bits, &(*raw)[r * y_stride + o], 4);
        ASSERT_EQ(bits, 0xFFFFFFFFu) << "write past out in row " << r;
      }
    }
  };
  std::vector<double> y;
  std::vector<float> y_raw;
  ASSERT_NO_FATAL_FAILURE(run(args, &y, &y_raw));
  const std::string what = std::string(GgmlTypeName(type)) + " out " + std::to_string(out) +
                           " in " + std::to_string(in) + " rows " + std::to_string(rows) +
                           (q8 ? " q8" : " f32");
  const double rel = RelError(y, ref);
  if (!q8) {
    EXPECT_LE(rel, kMaxRelError) << what;
    std::printf("[ rel ] %s rel_error=%.3g\n", what.c_str(), rel);
    return;
  }

  // The quantized activations in the scratch, byte for byte, in the type's order.
  std::vector<uint8_t> scratch(scratch_bytes);
  ASSERT_EQ(cudaMemcpy(scratch.data(), ds.ptr, scratch_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<int8_t> expect_q(hq.q.size());
  for (size_t i = 0; i < hq.q.size(); ++i) {
    const size_t block = i / 32 * 32;
    expect_q[block + Q8ScratchPosition(type, static_cast<int>(i % 32))] = hq.q[i];
  }
  ASSERT_EQ(std::memcmp(scratch.data(), expect_q.data(), expect_q.size()), 0)
      << what << ": int8 activations differ from the host quantization";
  const int64_t scales_at = GemvCudaScratchBytes(in, rows) - rows * (in / 32) * 8;
  for (int64_t i = 0; i < rows * (in / 32); ++i) {
    float d, s;
    std::memcpy(&d, &scratch[scales_at + 8 * i], 4);
    std::memcpy(&s, &scratch[scales_at + 8 * i + 4], 4);
    ASSERT_EQ(d, hq.d[i]) << what << " scale " << i;
    ASSERT_EQ(s, hq.s[i]) << what << " sum " << i;
  }
  const double rel_q8 = RelError(y, ref_q8);
  EXPECT_LE(rel_q8, kMaxRelError) << what << " vs quantized-X reference";
  EXPECT_LE(rel, kMaxRelErrorQ8VsF32) << what << " vs F32 reference";
  std::printf("[ rel ] %s rel_error_vs_q8x=%.3g rel_error_vs_f32=%.3g\n", what.c_str(), rel_q8,
              rel);

  // Reusing the quantized X (no X pointer at all) gives the same bits.
  GemvCudaArgs again = args;
  again.x = nullptr;
  again.x_prequantized = true;
  std::vector<double> y2;
  std::vector<float> y2_raw;
  ASSERT_NO_FATAL_FAILURE(run(again, &y2, &y2_raw));
  EXPECT_EQ(std::memcmp(y_raw.data(), y2_raw.data(), y_raw.size() * 4), 0) << what;

  // One IQ4_XS row: the one-row GEMV with its whole iterations free of per-step guards
  // (STEPSERVE_GEMV_ONE_ROW_WHOLE) computes the same arithmetic in the same order as the guarded
  // form, so the same bits.
  if (type == GgmlType::kIQ4_XS && rows == 1) {
    std::vector<double> y_guarded, y_whole;
    std::vector<float> y_guarded_raw, y_whole_raw;
    {
      const OneRowWholeScope guarded(false);
      ASSERT_NO_FATAL_FAILURE(run(again, &y_guarded, &y_guarded_raw));
    }
    {
      const OneRowWholeScope whole(true);
      ASSERT_NO_FATAL_FAILURE(run(again, &y_whole, &y_whole_raw));
    }
    EXPECT_EQ(std::memcmp(y_guarded_raw.data(), y_whole_raw.data(), y_whole_raw.size() * 4), 0)
        << what << ": the whole-iteration one-row GEMV differs from the guarded one";
  }
}

// {33, 2304}: an odd number of blocks (9) on a long row: with IQ4_XS the last block starts 16-byte
// aligned and ends 8 bytes before the padded row end.
INSTANTIATE_TEST_SUITE_P(
    Shapes, GemvCudaTest,
    ::testing::Combine(::testing::Values(GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K,
                                         GgmlType::kIQ4_XS),
                       ::testing::Values(std::pair<int64_t, int64_t>{33, 256},
                                         std::pair<int64_t, int64_t>{33, 4096},
                                         std::pair<int64_t, int64_t>{33, 2304},
                                         std::pair<int64_t, int64_t>{4095, 768},
                                         std::pair<int64_t, int64_t>{37, 1280}),
                       ::testing::Values(1, 3, 8, 16),
                       ::testing::Values(GemvCudaActivations::kQ8, GemvCudaActivations::kF32)));

// One row of IQ4_XS where the one-row GEMV's whole iterations apply (4096 wide in Shapes: one
// iteration of 4 steps per lane group): 12288 wide (two with refills, then the last), 11264 (one
// with refills, then a guarded tail), 9216 (another tail) and 8452 rows x 4096 (past 2112 CTAs of
// 4 warps: warps loop over rows).
INSTANTIATE_TEST_SUITE_P(
    OneRowIq4Xs, GemvCudaTest,
    ::testing::Combine(::testing::Values(GgmlType::kIQ4_XS),
                       ::testing::Values(std::pair<int64_t, int64_t>{33, 12288},
                                         std::pair<int64_t, int64_t>{35, 11264},
                                         std::pair<int64_t, int64_t>{29, 9216},
                                         std::pair<int64_t, int64_t>{8452, 4096}),
                       ::testing::Values(1), ::testing::Values(GemvCudaActivations::kQ8)));

// 2 and 4 rows of IQ4_XS (3 is in Shapes): the kernels compiled for exactly that many rows, long
// (16 blocks) and short (1, 3, 5 blocks: one row per lane group) rows.
INSTANTIATE_TEST_SUITE_P(
    FewRowsIq4Xs, GemvCudaTest,
    ::testing::Combine(::testing::Values(GgmlType::kIQ4_XS),
                       ::testing::Values(std::pair<int64_t, int64_t>{33, 256},
                                         std::pair<int64_t, int64_t>{33, 4096},
                                         std::pair<int64_t, int64_t>{4095, 768},
                                         std::pair<int64_t, int64_t>{37, 1280}),
                       ::testing::Values(2, 4), ::testing::Values(GemvCudaActivations::kQ8)));

// 17-32 rows: IQ4_XS through the wide tensor-core GEMV (4 tiles of 8 activation rows, partly or
// wholly used), int8 activations only.
INSTANTIATE_TEST_SUITE_P(
    WideIq4Xs, GemvCudaTest,
    ::testing::Combine(::testing::Values(GgmlType::kIQ4_XS),
                       ::testing::Values(std::pair<int64_t, int64_t>{33, 256},
                                         std::pair<int64_t, int64_t>{33, 2304},
                                         std::pair<int64_t, int64_t>{4095, 768},
                                         std::pair<int64_t, int64_t>{37, 1280}),
                       ::testing::Values(17, 25, 32), ::testing::Values(GemvCudaActivations::kQ8)));

// Q5_K has the int8 path only (the exact F32 mode takes the generic GEMV).
INSTANTIATE_TEST_SUITE_P(Q5K, GemvCudaTest,
                         ::testing::Combine(::testing::Values(GgmlType::kQ5_K),
                                            ::testing::Values(std::pair<int64_t, int64_t>{33, 256},
                                                              std::pair<int64_t, int64_t>{33, 4096},
                                                              std::pair<int64_t, int64_t>{4095,
                                                                                          768}),
                                            ::testing::Values(1, 3, 8, 16),
                                            ::testing::Values(GemvCudaActivations::kQ8)));

// The 2-3 bit types (gemv_q8x_pieces_low_bit.cuh): int8 path only. {33, 2304}: 9 blocks, so
// the 2-byte aligned 66 / 74 / 82 / 98 / 110-byte blocks meet every phase; {37, 1280}: short rows.
INSTANTIATE_TEST_SUITE_P(
    LowBit, GemvCudaTest,
    ::testing::Combine(::testing::Values(GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S,
                                         GgmlType::kIQ3_XXS, GgmlType::kIQ3_S, GgmlType::kQ2_K,
                                         GgmlType::kQ3_K),
                       ::testing::Values(std::pair<int64_t, int64_t>{33, 256},
                                         std::pair<int64_t, int64_t>{33, 4096},
                                         std::pair<int64_t, int64_t>{33, 2304},
                                         std::pair<int64_t, int64_t>{4095, 768},
                                         std::pair<int64_t, int64_t>{37, 1280}),
                       ::testing::Values(1, 2, 3, 8, 16),
                       ::testing::Values(GemvCudaActivations::kQ8)));

TEST(GemvCudaValidateTest, LowBitTypesOnlyWhenTurnedOnAndOnlyWithInt8Activations) {
  const bool before = SetGemvCudaLowBitTypes(false);
  EXPECT_FALSE(GemvCudaSupports(GgmlType::kIQ3_S));
  EXPECT_TRUE(GemvCudaSupports(GgmlType::kIQ4_XS));
  SetGemvCudaLowBitTypes(true);
  for (GgmlType t : {GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S, GgmlType::kIQ3_XXS,
                     GgmlType::kIQ3_S, GgmlType::kQ2_K, GgmlType::kQ3_K}) {
    EXPECT_TRUE(GemvCudaSupports(t)) << GgmlTypeName(t);
    GemvCudaArgs a{.type = t,
                   .w = reinterpret_cast<const void*>(uintptr_t{256}),
                   .w_row_bytes = 1024,
                   .in = 256,
                   .out = 4,
                   .x = reinterpret_cast<const float*>(uintptr_t{256}),
                   .x_stride = 256,
                   .rows = 1,
                   .y = reinterpret_cast<float*>(uintptr_t{256}),
                   .y_stride = 4,
                   .activations = GemvCudaActivations::kF32};
    EXPECT_EQ(ValidateGemvCuda(a), KernelStatus::kUnsupportedType) << GgmlTypeName(t);
  }
  EXPECT_FALSE(GemvCudaSupports(GgmlType::kIQ1_S));  // no piece
  SetGemvCudaLowBitTypes(before);
}

}  // namespace
}  // namespace stepserve::kernels
