// The CUDA backend's side stream, in two uses, each against the same ops in order (bit for bit:
// the same kernels on the same int8 activations). CudaBackend::ConcurrentMatmuls with it on
// (set_concurrent_matmuls): activations quantized by the GEMVs (job 0 in the Matmul scratch, the
// side jobs in their own) and prequantized by a norm (the fused quantization), mixed types
// (IQ4_XS's pair order beside Q5_K's and Q8_0's natural order: attn_v beside q/k/gate), 1-16
// rows, and 17, where it falls back to the Matmuls. BeginSide / EndSide / JoinSide
// (set_side_shared_expert): a shared-expert-shaped FFN on the side. Outputs are poisoned first.
// Recorded step graphs with a fork and join are covered by the step-graph and whole-model tests run
// with the switches on (bench/gpu/calls/session31-concurrent.sh).
#include <cmath>
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
using gpu_testing::PoisonedMat;
using gpu_testing::RandomNormal;
using gpu_testing::UploadMat;

constexpr int64_t kEmbd = 2048;  // > 1024: the block norm kernel that fuses the quantization

struct Job {
  GgmlType type;
  int64_t out;
};
// q/k/gate fused (IQ4_XS), attn_v (Q5_K), one more natural-order type; odd output counts. Q5_K's
// 1025 outputs (9 tiles of 128) take the dense grouped GEMM in 8 K slices at 9-16 rows: on the side
// stream under STEPSERVE_SIDE_DENSE_MATMULS=1, else the jobs run in order.
constexpr Job kJobs[] = {
    {GgmlType::kIQ4_XS, 1031}, {GgmlType::kQ5_K, 1025}, {GgmlType::kQ8_0, 129}};

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// CudaBackendFixture with a generator seeded by its printed seed, and weights' seeds drawn from
// that seed in order.
class SideStreamCudaTest : public gpu_testing::CudaBackendFixture {
 protected:
  void SetUp() override {
    CudaBackendFixture::SetUp();
    rng_.seed(seed_);
  }
  WeightView Place(GgmlType type, int64_t in, int64_t out) {
    return CudaBackendFixture::Place(type, in, out, 1, seed_ + ++placed_, 0.05f);
  }
  WeightView NormWeight() { return F32Weight(RandomNormal(kEmbd, rng_, 0.5f)); }

  int placed_ = 0;
  std::mt19937_64 rng_;
};

TEST_F(SideStreamCudaTest, ConcurrentMatmulsAreBitwiseTheMatmulsInOrder) {
  Backend* backend = backend_.get();
  CudaBackend* cuda = cuda_;
  std::mt19937_64& rng = rng_;
  std::vector<WeightView> weights;
  for (const Job& job : kJobs) weights.push_back(Place(job.type, kEmbd, job.out));
  const WeightView norm_w = NormWeight();

  for (const int64_t rows : {int64_t{1}, int64_t{3}, int64_t{16}, int64_t{17}}) {
    for (const bool after_norm : {false, true}) {
      for (const size_t n_jobs : {size_t{2}, size_t{3}}) {
        SCOPED_TRACE("rows " + std::to_string(rows) + (after_norm ? " after a norm" : " plain") +
                     " jobs " + std::to_string(n_jobs));
        const std::vector<float> x0 = RandomNormal(static_cast<size_t>(kEmbd * rows), rng);
        std::vector<float> results[2][3];
        uint64_t prequantized[2] = {0, 0};
        for (const bool concurrent : {false, true}) {
          cuda->set_concurrent_matmuls(concurrent);
          DeviceMat x = UploadMat(*backend, x0, kEmbd, rows);
          DeviceMat a = PoisonedMat(*backend, kEmbd, rows);
          const TensorView input = after_norm ? a.view : x.view;
          // The outputs are allocated and poisoned before the norm: an Allocate or Upload between
          // a norm and its GEMVs drops the norm's int8 activations (the backend cannot tell what
          // it overwrote), and the fused path would then not run at all.
          std::vector<DeviceMat> ys;
          std::vector<MatmulJob> jobs;
          for (size_t i = 0; i < n_jobs; ++i) {
            ys.push_back(PoisonedMat(*backend, kJobs[i].out, rows));
            jobs.push_back({input, weights[i], ys[i].view});
          }
          if (after_norm) {
            ASSERT_TRUE(backend->RmsNorm(x.view, norm_w, 1e-5f, a.view).ok());
          }
          const uint64_t uses = cuda->prequantized_uses();
          if (concurrent) {
            const absl::Status s = backend->ConcurrentMatmuls(jobs);
            ASSERT_TRUE(s.ok()) << s;
          } else {
            for (const MatmulJob& job : jobs)
              ASSERT_TRUE(backend->Matmul(job.x, job.w, job.y).ok());
          }
          prequantized[concurrent] = cuda->prequantized_uses() - uses;
          for (size_t i = 0; i < n_jobs; ++i) results[concurrent][i] = DownloadMat(*backend, ys[i]);
        }
        cuda->set_concurrent_matmuls(false);
        EXPECT_EQ(prequantized[0], prequantized[1]);
        if (after_norm && rows <= 16) {
          EXPECT_GT(prequantized[1], 0u);  // the fused path ran
        }
        for (size_t i = 0; i < n_jobs; ++i) {
          SCOPED_TRACE(GgmlTypeName(kJobs[i].type));
          for (const float v : results[1][i]) ASSERT_FALSE(std::isnan(v)) << "an output unwritten";
          EXPECT_TRUE(BitwiseEqual(results[0][i], results[1][i]));
        }
      }
    }
  }
}

// BeginSide / EndSide / JoinSide (set_side_shared_expert): a shared-expert-shaped FFN on the side
// (gate / up GEMVs on the norm's int8 activations, SwiGLU writing its own int8 form, down GEMV)
// while the main line runs a GEMV on the norm's output - which must still find the norm's int8
// activations, not the side SwiGLU's. Bitwise the ops in order, 1 / 3 / 8 / 9 / 16 rows; past
// SideBranchMaxRows (8 unless STEPSERVE_SIDE_SHARED_MAX_ROWS) BeginSide declines (false) and the
// ops run in order.
TEST_F(SideStreamCudaTest, SharedExpertShapedSideBranchIsBitwiseTheOpsInOrder) {
  Backend* backend = backend_.get();
  CudaBackend* cuda = cuda_;
  std::mt19937_64& rng = rng_;
  constexpr int64_t kFf = 1280;
  const WeightView gate = Place(GgmlType::kIQ4_XS, kEmbd, kFf);
  const WeightView up = Place(GgmlType::kIQ4_XS, kEmbd, kFf);
  const WeightView down = Place(GgmlType::kIQ4_XS, kFf, kEmbd);
  const WeightView main_w = Place(GgmlType::kQ8_0, kEmbd, 257);
  const WeightView norm_w = NormWeight();
  for (const int64_t rows : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{9}, int64_t{16}}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    const std::vector<float> x0 = RandomNormal(static_cast<size_t>(kEmbd * rows), rng);
    std::vector<float> side_out[2], main_out[2];
    for (const bool branch : {false, true}) {
      cuda->set_side_shared_expert(branch);
      DeviceMat x = UploadMat(*backend, x0, kEmbd, rows);
      DeviceMat f = PoisonedMat(*backend, kEmbd, rows);
      DeviceMat g = PoisonedMat(*backend, kFf, rows);
      DeviceMat u = PoisonedMat(*backend, kFf, rows);
      DeviceMat s = PoisonedMat(*backend, kEmbd, rows);
      DeviceMat y = PoisonedMat(*backend, 257, rows);
      ASSERT_TRUE(backend->RmsNorm(x.view, norm_w, 1e-5f, f.view).ok());
      absl::StatusOr<bool> side = backend->BeginSide(rows);
      ASSERT_TRUE(side.ok()) << side.status();
      EXPECT_EQ(*side, branch && rows <= CudaBackend::SideBranchMaxRows());
      ASSERT_TRUE(backend->Matmul(f.view, gate, g.view).ok());
      ASSERT_TRUE(backend->Matmul(f.view, up, u.view).ok());
      ASSERT_TRUE(backend->SwiGlu(g.view, u.view, 7.0f, g.view).ok());
      ASSERT_TRUE(backend->Matmul(g.view, down, s.view).ok());
      ASSERT_TRUE(backend->EndSide().ok());
      const uint64_t uses = cuda->prequantized_uses();
      ASSERT_TRUE(backend->Matmul(f.view, main_w, y.view).ok());
      // The main line's GEMV read the norm's int8 activations only where the side kept its own.
      if (*side) {
        EXPECT_EQ(cuda->prequantized_uses() - uses, 1u);
      }
      ASSERT_TRUE(backend->JoinSide().ok());
      side_out[branch] = DownloadMat(*backend, s);
      main_out[branch] = DownloadMat(*backend, y);
    }
    cuda->set_side_shared_expert(false);
    for (const float v : side_out[1]) ASSERT_FALSE(std::isnan(v)) << "a side output unwritten";
    for (const float v : main_out[1]) ASSERT_FALSE(std::isnan(v)) << "a main output unwritten";
    EXPECT_TRUE(BitwiseEqual(side_out[0], side_out[1]));
    EXPECT_TRUE(BitwiseEqual(main_out[0], main_out[1]));
  }
}

}  // namespace
}  // namespace stepserve
