// Backend registry and the CPU backend's shape checks and op wiring (against kernel references).
#include "engine/backend/backend.h"

#include <vector>

#include "engine/quant/quant.h"
#include "gtest/gtest.h"
#include "kernels/matmul/matmul.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope.h"
#include "tests/kernels/test_util.h"

namespace stepserve {
namespace {

using kernels::testing::Poisoned;
using kernels::testing::RandomVector;
using kernels::testing::RelError;

TEST(BackendRegistryTest, CpuIsRegisteredAndUnknownIsNotFound) {
  auto cpu = CreateBackend("cpu", {.num_threads = 2});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->name(), "cpu");
  auto missing = CreateBackend("tpu");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("cpu"), std::string_view::npos);
  EXPECT_EQ(
      RegisterBackend("cpu",
                      [](const BackendOptions&) {
                        return absl::StatusOr<std::unique_ptr<Backend>>(absl::InternalError("x"));
                      })
          .code(),
      absl::StatusCode::kAlreadyExists);
}

TEST(CpuBackendTest, MatmulMatchesReferenceAndRejectsBadShapes) {
  auto ops = *CreateBackend("cpu", {.num_threads = 2});
  const int64_t in = 256, out = 33, rows = 3;
  std::vector<uint8_t> w(RowBytes(GgmlType::kQ4_K, in) * out);
  ASSERT_TRUE(quant::FillRandomBlocks(GgmlType::kQ4_K, w.data(), out, 3, 0.5f).ok());
  WeightView wv{w.data(), GgmlType::kQ4_K, {in, out, 1, 1}, 0};
  std::vector<float> x = RandomVector(in * rows, 1), y = Poisoned(out * rows),
                     ref = Poisoned(out * rows);
  ASSERT_TRUE(
      ops->Matmul(TensorView::F32(x.data(), in, rows), wv, TensorView::F32(y.data(), out, rows))
          .ok());
  kernels::MatmulArgs a{
      GgmlType::kQ4_K, w.data(), RowBytes(GgmlType::kQ4_K, in), in, out, x.data(), in, rows,
      ref.data(),      out};
  ASSERT_EQ(kernels::MatmulRef(a), kernels::KernelStatus::kOk);
  EXPECT_LT(RelError(y, ref), 2e-5);
  absl::Status bad = ops->Matmul(TensorView::F32(x.data(), in, rows), wv,
                                 TensorView::F32(y.data(), out + 1, rows));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("Matmul"), std::string_view::npos);
}

TEST(CpuBackendTest, QkNormRopeIsPerHeadNormThenRope) {
  auto ops = *CreateBackend("cpu", {.num_threads = 2});
  const int64_t tokens = 3, heads = 4, dh = 32, n_rot = 16;
  std::vector<float> q = RandomVector(tokens * heads * dh, 5), nw = RandomVector(dh, 6);
  std::vector<int32_t> pos = {3, 700, 9};
  std::vector<float> want = q;
  kernels::RmsNormArgs n{want.data(), heads * dh, want.data(), heads * dh, tokens,
                         heads,       dh,         nw.data(),   1e-5f};
  ASSERT_EQ(kernels::RmsNormRef(n), kernels::KernelStatus::kOk);
  kernels::RopeArgs r{want.data(), heads * dh, tokens, heads, dh, pos.data(), n_rot, 1e4f, nullptr};
  ASSERT_EQ(kernels::RopeNeoxRef(r), kernels::KernelStatus::kOk);
  QkNormRopeParams p;
  p.head_dim = dh;
  p.q_norm = {nw.data(), GgmlType::kF32, {dh, 1, 1, 1}, 0};
  p.k_norm = p.q_norm;
  p.n_rot = n_rot;
  p.base = 1e4f;
  ASSERT_TRUE(
      ops->QkNormRope(TensorView::F32(q.data(), heads * dh, tokens), TensorView{}, p, pos).ok());
  EXPECT_LT(RelError(q, want), 1e-4);
}

TEST(CpuBackendTest, AppendKvThenAttentionOverOnePosition) {
  auto ops = *CreateBackend("cpu", {.num_threads = 2});
  const int64_t dh = 32, block = 16;
  std::vector<float> kc(4 * block * dh), vc(4 * block * dh);
  KvCacheView cache{kc.data(), vc.data(), KvDtype::kF32, 4, block, 1, dh};
  std::vector<int32_t> table = {2, 0};
  std::vector<int32_t> pos = {17};
  SequenceSlice seq{0, 1, 18, table};
  AttentionBatch batch{pos, std::span<const SequenceSlice>(&seq, 1)};
  std::vector<float> k = RandomVector(dh, 1), v = RandomVector(dh, 2), q = RandomVector(2 * dh, 3);
  ASSERT_TRUE(ops->AppendKv(TensorView::F32(k.data(), dh, 1), TensorView::F32(v.data(), dh, 1),
                            batch, cache)
                  .ok());
  EXPECT_EQ(vc[(0 * block + 1) * dh + 5], v[5]);  // position 17 -> page table[1] = 0, slot 1
  // Window 1: the query sees only itself, so the output is exactly v for both heads (GQA 2).
  std::vector<float> out = Poisoned(2 * dh);
  ASSERT_TRUE(ops->Attention(TensorView::F32(q.data(), 2 * dh, 1), batch, cache,
                             {.window = 1, .scale = 0.17f}, TensorView::F32(out.data(), 2 * dh, 1))
                  .ok());
  for (int64_t d = 0; d < dh; ++d) {
    EXPECT_NEAR(out[d], v[d], 1e-6);
    EXPECT_NEAR(out[dh + d], v[d], 1e-6);
  }
  pos[0] = 40;  // past the block table
  EXPECT_EQ(ops->AppendKv(TensorView::F32(k.data(), dh, 1), TensorView::F32(v.data(), dh, 1), batch,
                          cache)
                .code(),
            absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace stepserve
