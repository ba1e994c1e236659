// Optimised CPU kernels against their scalar references (and the spec formulas written here):
// embedding, RMSNorm, partial NeoX RoPE, head gate, clamped SwiGLU, add, router, grouped MoE.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/base/thread_pool.h"
#include "engine/quant/quant.h"
#include "gtest/gtest.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/embed/embed.h"
#include "kernels/moe/moe.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope.h"
#include "tests/kernels/test_util.h"

namespace stepserve::kernels {
namespace {

using testing::Poisoned;
using testing::RandomVector;
using testing::RelError;

std::vector<uint8_t> RandomRows(GgmlType type, int64_t rows, int64_t n, uint64_t seed) {
  const int64_t row_bytes = RowBytes(type, n);
  std::vector<uint8_t> w(rows * row_bytes);
  EXPECT_TRUE(
      quant::FillRandomBlocks(type, w.data(), rows * n / TypeInfo(type).block_elems, seed, 0.3f)
          .ok());
  return w;
}

TEST(EmbedTest, MatchesDequantizedRows) {
  ThreadPool pool(2);
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kQ4_K, GgmlType::kQ8_0}) {
    const int64_t dim = 512, vocab = 13;
    std::vector<uint8_t> table = RandomRows(type, vocab, dim, 5);
    std::vector<int32_t> ids = {12, 0, 7, 7, 3};
    EmbedArgs a{type, table.data(), RowBytes(type, dim), vocab, dim, ids.data(), 5, nullptr, dim};
    std::vector<float> ref = Poisoned(5 * dim), got = Poisoned(5 * dim);
    a.out = ref.data();
    ASSERT_EQ(EmbedRef(a), KernelStatus::kOk);
    a.out = got.data();
    ASSERT_EQ(EmbedCpu(a, &pool), KernelStatus::kOk);
    EXPECT_EQ(RelError(got, ref), 0.0) << GgmlTypeName(type);
    ids[2] = 13;
    EXPECT_EQ(EmbedCpu(a, &pool), KernelStatus::kOutOfRange);
  }
}

TEST(RmsNormTest, RowsAndPerHeadMatchReference) {
  ThreadPool pool(3);
  for (auto [rows, heads, n] : {std::tuple<int64_t, int64_t, int64_t>{3, 1, 4096 + 7},
                                {7, 12, 128},
                                {300, 1, 333},
                                {1, 3, 192}}) {
    const int64_t stride = heads * n + 5;
    std::vector<float> x = RandomVector(rows * stride, rows + n, 2.0f);
    std::vector<float> w = RandomVector(n, n);
    RmsNormArgs a{x.data(), stride, nullptr, stride, rows, heads, n, w.data(), 1e-5f};
    std::vector<float> ref = Poisoned(rows * stride), got = Poisoned(rows * stride);
    a.y = ref.data();
    ASSERT_EQ(RmsNormRef(a), KernelStatus::kOk);
    a.y = got.data();
    ASSERT_EQ(RmsNormCpu(a, &pool), KernelStatus::kOk);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = heads * n; i < stride; ++i) ASSERT_TRUE(std::isnan(got[r * stride + i]));
      std::fill(got.begin() + r * stride + heads * n, got.begin() + (r + 1) * stride, 0.0f);
      std::fill(ref.begin() + r * stride + heads * n, ref.begin() + (r + 1) * stride, 0.0f);
    }
    EXPECT_LT(RelError(got, ref), 1e-6);
    // The formula itself on one vector: mean square of y / w is 1 (up to eps).
    double ms = 0;
    for (int64_t i = 0; i < n; ++i) ms += std::pow(double{ref[i]} / w[i], 2);
    EXPECT_NEAR(ms / n, 1.0, 1e-3);
  }
}

// Partial NeoX RoPE: the double-angle reference, llama.cpp's F32 angle recipe, untouched tail.
TEST(RopeTest, PartialDimsMatchFormula) {
  ThreadPool pool(2);
  for (bool with_ff : {false, true}) {
    const int64_t tokens = 7, heads = 3, dh = 128, n_rot = 64;
    const float base = with_ff ? 5e6f : 1e4f;
    std::vector<int32_t> pos = {0, 1, 5, 511, 512, 4095, 4999};
    std::vector<float> ff(n_rot / 2);
    for (int64_t j = 0; j < n_rot / 2; ++j) ff[j] = 1.0f + 0.25f * (j % 5);
    const std::vector<float> x = RandomVector(tokens * heads * dh, 3);
    RopeArgs a{nullptr, heads * dh, tokens,
               heads,   dh,         pos.data(),
               n_rot,   base,       with_ff ? ff.data() : nullptr};
    std::vector<float> ref = x, got = x;
    a.x = ref.data();
    ASSERT_EQ(RopeNeoxRef(a), KernelStatus::kOk);
    a.x = got.data();
    ASSERT_EQ(RopeNeoxCpu(a, &pool), KernelStatus::kOk);
    // F32 recipe of spec 4.4 step 3, written independently.
    std::vector<float> f32 = x;
    const float tau = std::pow(base, -2.0f / n_rot);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        float* v = f32.data() + (t * heads + h) * dh;
        float theta = static_cast<float>(pos[t]);
        for (int64_t j = 0; j < n_rot / 2; ++j) {
          const float phi = with_ff ? theta / ff[j] : theta;
          const float x0 = v[j], x1 = v[j + n_rot / 2];
          v[j] = x0 * std::cos(phi) - x1 * std::sin(phi);
          v[j + n_rot / 2] = x0 * std::sin(phi) + x1 * std::cos(phi);
          theta *= tau;
        }
        for (int64_t d = n_rot; d < dh; ++d) {  // dims past n_rot untouched, bit for bit
          ASSERT_EQ(got[(t * heads + h) * dh + d], x[(t * heads + h) * dh + d]);
          ASSERT_EQ(ref[(t * heads + h) * dh + d], x[(t * heads + h) * dh + d]);
        }
      }
    }
    EXPECT_LT(RelError(got, f32), 1e-6);
    EXPECT_LT(RelError(got, ref), 1e-4);      // F32 angle vs exact angle, positions < 5000
    EXPECT_EQ(RelError(ref, x) > 0.1, true);  // something did rotate
  }
  // Position 0 is the identity.
  std::vector<float> v = RandomVector(32, 9), w = v;
  int32_t p0 = 0;
  RopeArgs a{w.data(), 32, 1, 1, 32, &p0, 32, 1e4f, nullptr};
  ASSERT_EQ(RopeNeoxCpu(a, nullptr), KernelStatus::kOk);
  EXPECT_EQ(v, w);
  a.n_rot = 31;
  EXPECT_EQ(RopeNeoxCpu(a, nullptr), KernelStatus::kInvalidArgument);
}

TEST(ElementwiseTest, HeadGateSwiGluAddMatchReference) {
  ThreadPool pool(2);
  const int64_t rows = 7, heads = 5, dh = 33, n = 1283;
  {
    std::vector<float> o = RandomVector(rows * heads * dh, 1), gate = RandomVector(rows * heads, 2);
    std::vector<float> ref = o, got = o;
    HeadGateArgs a{ref.data(), heads * dh, gate.data(), heads, rows, heads, dh};
    ASSERT_EQ(HeadGateRef(a), KernelStatus::kOk);
    a.o = got.data();
    ASSERT_EQ(HeadGateCpu(a, &pool), KernelStatus::kOk);
    EXPECT_LT(RelError(got, ref), 1e-6);
    EXPECT_NEAR(ref[0], o[0] / (1 + std::exp(-gate[0])), 1e-6);
  }
  const std::vector<float> g = RandomVector(rows * n, 3, 4.0f), u = RandomVector(rows * n, 4, 4.0f);
  for (float limit : {0.0f, 1e-7f, 2.5f}) {
    SwiGluArgs a{g.data(), n, u.data(), n, nullptr, n, rows, n, limit};
    std::vector<float> ref = Poisoned(rows * n), got = Poisoned(rows * n);
    a.z = ref.data();
    ASSERT_EQ(SwiGluRef(a), KernelStatus::kOk);
    a.z = got.data();
    ASSERT_EQ(SwiGluCpu(a, &pool), KernelStatus::kOk);
    EXPECT_LT(RelError(got, ref), 1e-6) << limit;
    // Spec: clamps only when limit > 1e-6; act is capped after SiLU, u clamped both sides.
    int clamped = 0;
    for (int64_t i = 0; i < rows * n; ++i) {
      const double silu = g[i] / (1 + std::exp(-double{g[i]}));
      const double want = limit > 1e-6f
                              ? std::min(silu, double{limit}) *
                                    std::clamp(double{u[i]}, -double{limit}, double{limit})
                              : silu * u[i];
      clamped += limit > 1e-6f && (silu > limit || std::abs(u[i]) > limit);
      ASSERT_NEAR(ref[i], want, 1e-5 * (1 + std::abs(want)));
    }
    if (limit > 1e-6f) EXPECT_GT(clamped, 100);
  }
  {
    std::vector<float> x = RandomVector(rows * n, 5), y = RandomVector(rows * n, 6);
    std::vector<float> ref = Poisoned(rows * n), got = Poisoned(rows * n);
    AddArgs a{x.data(), n, y.data(), n, ref.data(), n, rows, n};
    ASSERT_EQ(AddRef(a), KernelStatus::kOk);
    a.y = got.data();
    ASSERT_EQ(AddCpu(a, &pool), KernelStatus::kOk);
    EXPECT_EQ(RelError(got, ref), 0.0);
  }
}

TEST(RouterTest, TopKWithBiasUnbiasedWeightsNormAndScale) {
  ThreadPool pool(2);
  const int64_t rows = 7, n_exp = 37, k = 5;
  const std::vector<float> logits = RandomVector(rows * n_exp, 11, 2.0f);
  const std::vector<float> bias = RandomVector(n_exp, 12, 0.5f);
  for (GatingFunc gating : {GatingFunc::kSigmoid, GatingFunc::kSoftmax}) {
    for (bool norm : {false, true}) {
      for (float scale : {0.0f, 1.0f, 2.5f}) {
        std::vector<int32_t> ids_ref(rows * k), ids_got(rows * k, -7);
        std::vector<float> w_ref = Poisoned(rows * k), w_got = Poisoned(rows * k);
        RouterArgs a{logits.data(), n_exp, rows,  n_exp,          bias.data(), k,
                     gating,        norm,  scale, ids_ref.data(), w_ref.data()};
        ASSERT_EQ(RouterRef(a), KernelStatus::kOk);
        a.ids = ids_got.data();
        a.weights = w_got.data();
        ASSERT_EQ(RouterCpu(a, &pool), KernelStatus::kOk);
        EXPECT_EQ(ids_got, ids_ref);
        EXPECT_LT(RelError(w_got, w_ref), 1e-6);
        for (int64_t r = 0; r < rows; ++r) {
          double sum = 0;
          for (int64_t j = 0; j < k; ++j) sum += w_ref[r * k + j];
          if (norm) EXPECT_NEAR(sum, (scale == 0.0f || scale == 1.0f) ? 1.0 : scale, 1e-5);
        }
      }
    }
  }
  // Hand-made case: the bias changes which experts win; weights stay the unbiased sigmoid.
  const float l[4] = {2.0f, 1.0f, 0.0f, -1.0f};
  const float b[4] = {0.0f, 0.0f, 0.0f, 5.0f};
  int32_t ids[2];
  float w[2];
  RouterArgs a{l, 4, 1, 4, b, 2, GatingFunc::kSigmoid, false, 3.0f, ids, w};
  ASSERT_EQ(RouterCpu(a, nullptr), KernelStatus::kOk);
  EXPECT_EQ(ids[0], 3);
  EXPECT_EQ(ids[1], 0);
  EXPECT_NEAR(w[0], 3.0 / (1 + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(w[1], 3.0 / (1 + std::exp(-2.0)), 1e-6);
  // Renormalisation floor: tiny weights are divided by 6.103515625e-5, not by their sum.
  const float tiny[2] = {-30.0f, -31.0f};
  a = RouterArgs{tiny, 2, 1, 2, nullptr, 2, GatingFunc::kSigmoid, true, 1.0f, ids, w};
  ASSERT_EQ(RouterCpu(a, nullptr), KernelStatus::kOk);
  EXPECT_NEAR(w[0], (1 / (1 + std::exp(30.0))) / 6.103515625e-5, 1e-9);
}

TEST(MoeExpertsTest, GroupedMatchesPerRowLoop) {
  ThreadPool pool(3);
  const int64_t d = 256, ff = 96, n_exp = 6, k = 3;
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_K}) {
    const GgmlType down_type = type == GgmlType::kQ4_K ? GgmlType::kQ8_0 : type;  // ff=96
    std::vector<uint8_t> gate = RandomRows(type, n_exp * ff, d, 1);
    std::vector<uint8_t> up = RandomRows(type, n_exp * ff, d, 2);
    std::vector<uint8_t> down = RandomRows(down_type, n_exp * d, ff, 3);
    for (int64_t rows : {1, 3, 7}) {
      for (float limit : {0.0f, 0.3f}) {
        const std::vector<float> x = RandomVector(rows * d, rows);
        std::vector<int32_t> ids(rows * k);
        std::vector<float> w = RandomVector(rows * k, rows + 1);
        for (int64_t i = 0; i < rows * k; ++i)
          ids[i] = static_cast<int32_t>((i * 5 + i / k) % n_exp);
        MoeExpertsArgs a;
        a.x = x.data();
        a.x_stride = d;
        a.rows = rows;
        a.n_embd = d;
        a.n_ff = ff;
        a.n_experts = n_exp;
        a.ids = ids.data();
        a.weights = w.data();
        a.top_k = k;
        a.gate = {type, gate.data(), RowBytes(type, d), RowBytes(type, d) * ff};
        a.up = {type, up.data(), RowBytes(type, d), RowBytes(type, d) * ff};
        a.down = {down_type, down.data(), RowBytes(down_type, ff), RowBytes(down_type, ff) * d};
        a.limit = limit;
        a.y_stride = d;
        const std::vector<float> y0 = RandomVector(rows * d, 77);  // accumulated into
        std::vector<float> ref = y0, got = y0;
        a.y = ref.data();
        ASSERT_EQ(MoeExpertsRef(a), KernelStatus::kOk);
        std::vector<float> ws = Poisoned(MoeExpertsWorkspaceFloats(rows, k, d, ff));
        std::vector<int32_t> iws(MoeExpertsIndexWorkspaceLen(rows, k, n_exp), -1);
        a.workspace = ws.data();
        a.workspace_floats = static_cast<int64_t>(ws.size());
        a.index_workspace = iws.data();
        a.index_workspace_len = static_cast<int64_t>(iws.size());
        a.y = got.data();
        ASSERT_EQ(MoeExpertsCpu(a, &pool), KernelStatus::kOk);
        std::vector<float> dref(rows * d), dgot(rows * d);
        for (int64_t i = 0; i < rows * d; ++i) {
          dref[i] = ref[i] - y0[i];
          dgot[i] = got[i] - y0[i];
        }
        EXPECT_LT(RelError(dgot, dref), 1e-4) << GgmlTypeName(type) << " rows " << rows;
        ids[0] = static_cast<int32_t>(n_exp);
        EXPECT_EQ(MoeExpertsCpu(a, &pool), KernelStatus::kOutOfRange);
      }
    }
  }
}

}  // namespace
}  // namespace stepserve::kernels
