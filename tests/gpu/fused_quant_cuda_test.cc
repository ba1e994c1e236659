// Fused quantization on the CUDA backend (CudaBackend::PrequantizedX, STEPSERVE_FUSED_QUANT): a
// norm, head gate or SwiGLU of up to 16 rows also writes its output as the GEMV's int8
// activations, and the Matmul / MoeExperts reading that output skip their quantizer. The int8 bytes
// are by construction those the quantizer writes (one device function, q8_quantize.cuh), so every
// result must be bitwise equal to the unfused path's - for IQ4_XS (pair order) and Q4_K / Q8_0
// (natural order), 1-16 rows, AddRmsNorm and RmsNorm, the decode MoE; and an op writing the norm's
// output in between must make the next Matmul quantize again (no stale activations).
// prequantized_uses() proves the fused path ran at all.
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "gtest/gtest.h"
#include "tests/gpu/backend_test_util.h"
#include "tests/gpu/cuda_backend_fixture.h"
#include "tests/gpu/weight_test_util.h"

namespace stepserve {
namespace {

using gpu_testing::DeviceMat;
using gpu_testing::DownloadMat;
using gpu_testing::RandomNormal;
using gpu_testing::UploadBytes;
using gpu_testing::UploadMat;

constexpr int64_t kEmbd = 2048;  // > 1024: the float4 block norm kernel, which fuses
constexpr int64_t kOut = 520;

// Sets the process-wide switch for a scope.
struct FusedQuantScope {
  bool was;
  explicit FusedQuantScope(bool enabled) : was(SetCudaFusedQuantization(enabled)) {}
  ~FusedQuantScope() { SetCudaFusedQuantization(was); }
};

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

using FusedQuantCudaTest = gpu_testing::CudaBackendFixture;

// {y of the Matmul after the norm, the norm's output, h} with fusion on or off.
struct NormMatmulResult {
  std::vector<float> y, out, h;
};

TEST_F(FusedQuantCudaTest, NormThenMatmulIsBitwiseTheUnfusedPath) {
  std::mt19937_64 rng(seed_);
  for (const GgmlType type : {GgmlType::kIQ4_XS, GgmlType::kQ4_K, GgmlType::kQ8_0}) {
    const WeightView w = Place(type, kEmbd, kOut, 1, seed_ + 1, 0.05f);
    const WeightView nw = F32Weight(RandomNormal(kEmbd, rng, 0.5f));
    for (const int64_t rows : {int64_t{1}, int64_t{3}, int64_t{16}}) {
      for (const bool with_add : {true, false}) {
        SCOPED_TRACE(std::string(GgmlTypeName(type)) + " rows " + std::to_string(rows) +
                     (with_add ? " AddRmsNorm" : " RmsNorm"));
        const std::vector<float> h0 = RandomNormal(static_cast<size_t>(kEmbd * rows), rng);
        const std::vector<float> delta = RandomNormal(static_cast<size_t>(kEmbd * rows), rng);
        NormMatmulResult got[2];
        for (const bool fused : {false, true}) {
          const FusedQuantScope scope(fused);
          DeviceMat h = UploadMat(*backend_, h0, kEmbd, rows);
          DeviceMat d = UploadMat(*backend_, delta, kEmbd, rows);
          DeviceMat out = gpu_testing::PoisonedMat(*backend_, kEmbd, rows);
          DeviceMat y = gpu_testing::PoisonedMat(*backend_, kOut, rows);
          const uint64_t uses = cuda_->prequantized_uses();
          const absl::Status norm = with_add
                                        ? backend_->AddRmsNorm(h.view, d.view, nw, 1e-5f, out.view)
                                        : backend_->RmsNorm(h.view, nw, 1e-5f, out.view);
          ASSERT_TRUE(norm.ok()) << norm;
          ASSERT_TRUE(backend_->Matmul(out.view, w, y.view).ok());
          EXPECT_EQ(cuda_->prequantized_uses() - uses, fused ? 1u : 0u);
          got[fused] = {DownloadMat(*backend_, y), DownloadMat(*backend_, out),
                        DownloadMat(*backend_, h)};
        }
        EXPECT_TRUE(BitwiseEqual(got[0].y, got[1].y));
        EXPECT_TRUE(BitwiseEqual(got[0].out, got[1].out));
        EXPECT_TRUE(BitwiseEqual(got[0].h, got[1].h));
      }
    }
  }
}

// An op that writes the norm's output between the norm and the Matmul: the Matmul must quantize
// the new values (bitwise the unfused result), not reuse the norm's int8 activations.
TEST_F(FusedQuantCudaTest, WritingTheOutputInBetweenForgetsTheActivations) {
  std::mt19937_64 rng(seed_);
  const int64_t rows = 2;
  const WeightView w = Place(GgmlType::kIQ4_XS, kEmbd, kOut, 1, seed_ + 2, 0.05f);
  const WeightView nw = F32Weight(std::vector<float>(kEmbd, 1.0f));
  const std::vector<float> h0 = RandomNormal(static_cast<size_t>(kEmbd * rows), rng);
  const std::vector<float> other = RandomNormal(static_cast<size_t>(kEmbd * rows), rng, 3.0f);
  for (const int writer : {0, 1, 2}) {  // Add into out, Upload into out, Zero out
    SCOPED_TRACE(writer);
    std::vector<float> results[2];
    for (const bool fused : {false, true}) {
      const FusedQuantScope scope(fused);
      DeviceMat h = UploadMat(*backend_, h0, kEmbd, rows);
      DeviceMat o = UploadMat(*backend_, other, kEmbd, rows);
      DeviceMat out = gpu_testing::PoisonedMat(*backend_, kEmbd, rows);
      DeviceMat y = gpu_testing::PoisonedMat(*backend_, kOut, rows);
      ASSERT_TRUE(backend_->RmsNorm(h.view, nw, 1e-5f, out.view).ok());
      if (writer == 0) {
        ASSERT_TRUE(backend_->Add(out.view, o.view, out.view).ok());
      }
      if (writer == 1) {
        ASSERT_TRUE(backend_->Upload(other.data(), out.buffer.data(), other.size() * 4).ok());
      }
      if (writer == 2) {
        ASSERT_TRUE(backend_->Zero(out.buffer.data(), other.size() * 4).ok());
      }
      const uint64_t uses = cuda_->prequantized_uses();
      ASSERT_TRUE(backend_->Matmul(out.view, w, y.view).ok());
      EXPECT_EQ(cuda_->prequantized_uses(), uses);  // quantized again
      results[fused] = DownloadMat(*backend_, y);
    }
    EXPECT_TRUE(BitwiseEqual(results[0], results[1]));
  }
}

// Head gate (in place on the attention output) and SwiGLU (in place on a strided column view, as
// the model runs the fused gate / up output) followed by the Matmul that reads them.
TEST_F(FusedQuantCudaTest, HeadGateAndSwiGluThenMatmulAreBitwiseTheUnfusedPath) {
  std::mt19937_64 rng(seed_);
  constexpr int64_t kHeads = 16, kHeadDim = 128, kWidth = kHeads * kHeadDim;  // 2048
  constexpr int64_t kFf = 1280;
  const WeightView w_o = Place(GgmlType::kIQ4_XS, kWidth, kOut, 1, seed_ + 6, 0.05f);
  const WeightView w_down = Place(GgmlType::kQ4_K, kFf, kOut, 1, seed_ + 7, 0.05f);
  for (const int64_t rows : {int64_t{1}, int64_t{7}, int64_t{16}}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    const std::vector<float> o0 = RandomNormal(static_cast<size_t>(kWidth * rows), rng);
    const std::vector<float> gate = RandomNormal(static_cast<size_t>(kHeads * rows), rng, 2.0f);
    // [gate | up] rows of 2 * kFf, as the fused gate / up projection writes them.
    const std::vector<float> gu = RandomNormal(static_cast<size_t>(2 * kFf * rows), rng, 3.0f);
    std::vector<float> got_o[2], got_down[2], got_z[2];
    for (const bool fused : {false, true}) {
      const FusedQuantScope scope(fused);
      DeviceMat o = UploadMat(*backend_, o0, kWidth, rows);
      DeviceMat g = UploadMat(*backend_, gate, kHeads, rows);
      DeviceMat fused_gu = UploadMat(*backend_, gu, 2 * kFf, rows);
      DeviceMat y_o = gpu_testing::PoisonedMat(*backend_, kOut, rows);
      DeviceMat y_down = gpu_testing::PoisonedMat(*backend_, kOut, rows);
      const uint64_t uses = cuda_->prequantized_uses();
      ASSERT_TRUE(backend_->HeadGate(o.view, g.view, kHeadDim).ok());
      ASSERT_TRUE(backend_->Matmul(o.view, w_o, y_o.view).ok());
      const TensorView gv = TensorView::F32(fused_gu.buffer.f32(), kFf, rows, 2 * kFf);
      const TensorView uv = TensorView::F32(fused_gu.buffer.f32() + kFf, kFf, rows, 2 * kFf);
      ASSERT_TRUE(backend_->SwiGlu(gv, uv, 7.0f, gv).ok());
      ASSERT_TRUE(backend_->Matmul(gv, w_down, y_down.view).ok());
      EXPECT_EQ(cuda_->prequantized_uses() - uses, fused ? 2u : 0u);
      got_o[fused] = DownloadMat(*backend_, y_o);
      got_down[fused] = DownloadMat(*backend_, y_down);
      got_z[fused] = DownloadMat(*backend_, fused_gu);
    }
    EXPECT_TRUE(BitwiseEqual(got_o[0], got_o[1]));
    EXPECT_TRUE(BitwiseEqual(got_down[0], got_down[1]));
    EXPECT_TRUE(BitwiseEqual(got_z[0], got_z[1]));
  }
}

// The decode MoE (MoeGemvCuda) after the FFN norm: gate and up read the norm's int8 activations,
// the expert down projection those its SwiGLU kernel wrote
// (MoeGemvCudaArgs::fuse_down_quantization).
TEST_F(FusedQuantCudaTest, NormThenMoeExpertsIsBitwiseTheUnfusedPath) {
  std::mt19937_64 rng(seed_);
  constexpr int64_t kExperts = 8, kTopK = 2, kFf = 512;
  for (const GgmlType type : {GgmlType::kIQ4_XS, GgmlType::kQ4_K}) {
    ExpertWeights e;
    e.gate = Place(type, kEmbd, kFf, kExperts, seed_ + 3, 0.05f);
    e.up = Place(type, kEmbd, kFf, kExperts, seed_ + 4, 0.05f);
    e.down = Place(type, kFf, kEmbd, kExperts, seed_ + 5, 0.05f);
    e.limit = 7.0f;
    const WeightView nw = F32Weight(RandomNormal(kEmbd, rng, 0.5f));
    for (const int64_t tokens : {int64_t{1}, int64_t{5}}) {
      SCOPED_TRACE(std::string(GgmlTypeName(type)) + " tokens " + std::to_string(tokens));
      std::vector<int32_t> ids;
      std::vector<float> weights;
      for (int64_t t = 0; t < tokens; ++t) {
        ids.push_back(static_cast<int32_t>((3 * t) % kExperts));
        ids.push_back(static_cast<int32_t>((3 * t + 5) % kExperts));
        weights.push_back(0.6f);
        weights.push_back(0.3f);
      }
      const std::vector<float> h0 = RandomNormal(static_cast<size_t>(kEmbd * tokens), rng);
      std::vector<float> got[2];
      for (const bool fused : {false, true}) {
        const FusedQuantScope scope(fused);
        DeviceMat h = UploadMat(*backend_, h0, kEmbd, tokens);
        DeviceMat f = gpu_testing::PoisonedMat(*backend_, kEmbd, tokens);
        BackendBuffer dev_ids = UploadBytes(*backend_, ids.data(), ids.size() * 4);
        BackendBuffer dev_w = UploadBytes(*backend_, weights.data(), weights.size() * 4);
        ASSERT_TRUE(backend_->RmsNorm(h.view, nw, 1e-5f, f.view).ok());
        const uint64_t uses = cuda_->prequantized_uses();
        ASSERT_TRUE(backend_
                        ->MoeExperts(f.view, e,
                                     {static_cast<const int32_t*>(dev_ids.data()), ids.size()},
                                     {static_cast<const float*>(dev_w.data()), weights.size()},
                                     kTopK, h.view)
                        .ok());
        EXPECT_EQ(cuda_->prequantized_uses() - uses, fused ? 1u : 0u);
        got[fused] = DownloadMat(*backend_, h);
      }
      EXPECT_TRUE(BitwiseEqual(got[0], got[1]));
    }
  }
}

}  // namespace
}  // namespace stepserve
