// MoeGemvCuda (indexed GEMVs + SwiGLU + combine, or at one token the two fused kernels of
// moe_decode_cuda.h, all on the device) against MoeExpertsRef (double precision, dequantized
// weights) on fresh random valid blocks. Outputs start as random values (y is accumulated into),
// expert ids are random per token with distinct slots, some experts are never picked, and several
// weight types and token counts are covered. The GEMVs round the activations (x and the SwiGLU
// intermediate) to int8 per 32 values, so the bound is the kQ8 bound of gemv_cuda_test (~5e-3
// typical, 3e-2 limit) rather than float rounding.
#include "kernels/matmul/moe_gemv_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/quant/ggml_type.h"
#include "engine/quant/quant.h"
#include "gtest/gtest.h"
#include "kernels/common/cuda_check.h"
#include "kernels/matmul/matmul_cuda.h"
#include "kernels/matmul/moe_decode_cuda.h"
#include "kernels/moe/moe.h"
#include "tests/gpu/cuda_test_util.h"
#include "tests/kernels/test_util.h"

namespace stepserve::kernels {
namespace {

constexpr double kMaxRelError = 3e-2;

using testing::DeviceBuffer;

// A random 3-D expert weight (E matrices of `out` rows of `in`): host packed rows and the device
// copy with rows padded to 16 bytes.
struct Experts {
  GgmlType type;
  int64_t in, out, n;
  int64_t row_bytes, pitch;
  std::vector<uint8_t> host;
  std::unique_ptr<DeviceBuffer> device;

  Experts(GgmlType t, int64_t in_, int64_t out_, int64_t n_, uint64_t seed)
      : type(t), in(in_), out(out_), n(n_) {
    row_bytes = RowBytes(type, in);
    pitch = (row_bytes + 15) / 16 * 16;
    host.resize(static_cast<size_t>(row_bytes * out * n));
    const int64_t blocks = in / TypeInfo(type).block_elems * out * n;
    EXPECT_TRUE(quant::FillRandomBlocks(type, host.data(), blocks, seed,
                                        1.0f / std::sqrt(static_cast<float>(in)))
                    .ok());
    std::vector<uint8_t> padded(static_cast<size_t>(pitch * out * n), 0);
    for (int64_t r = 0; r < out * n; ++r) {
      std::memcpy(padded.data() + r * pitch, host.data() + r * row_bytes, row_bytes);
    }
    device = std::make_unique<DeviceBuffer>(padded.size());
    EXPECT_EQ(cudaMemcpy(device->ptr, padded.data(), padded.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ExpertMatrix HostMatrix() const { return {type, host.data(), row_bytes, row_bytes * out}; }
  ExpertMatrixCuda DeviceMatrix() const { return {type, device->ptr, pitch, pitch * out}; }
};

template <class T>
std::unique_ptr<DeviceBuffer> ToDevice(const std::vector<T>& v) {
  auto d = std::make_unique<DeviceBuffer>(v.size() * sizeof(T));
  EXPECT_EQ(cudaMemcpy(d->ptr, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return d;
}

// MoeExpertsRef's arguments over the host copies, adding into `y` (rows of n_embd floats);
// n_embd, n_ff and n_experts from the gate matrices.
MoeExpertsArgs HostArgs(const Experts& gate, const Experts& up, const Experts& down,
                        const std::vector<float>& x, int64_t x_stride, int64_t tokens,
                        const std::vector<int32_t>& ids, const std::vector<float>& weights,
                        int64_t top_k, float limit, std::vector<float>* y) {
  MoeExpertsArgs r;
  r.x = x.data();
  r.x_stride = x_stride;
  r.rows = tokens;
  r.n_embd = gate.in;
  r.n_ff = gate.out;
  r.n_experts = gate.n;
  r.ids = ids.data();
  r.weights = weights.data();
  r.top_k = top_k;
  r.gate = gate.HostMatrix();
  r.up = up.HostMatrix();
  r.down = down.HostMatrix();
  r.limit = limit;
  r.y = y->data();
  r.y_stride = gate.in;
  return r;
}

// MoeGemvCuda's arguments over device copies (y, workspace and counters left to the caller);
// n_embd, n_ff and n_experts from the gate matrices.
MoeGemvCudaArgs DeviceArgs(const Experts& gate, const Experts& up, const Experts& down,
                           const DeviceBuffer& x, int64_t x_stride, int64_t tokens,
                           const DeviceBuffer& ids, const DeviceBuffer& weights, int64_t top_k,
                           float limit) {
  MoeGemvCudaArgs a;
  a.x = static_cast<const float*>(x.ptr);
  a.x_stride = x_stride;
  a.tokens = tokens;
  a.n_embd = gate.in;
  a.n_ff = gate.out;
  a.n_experts = gate.n;
  a.ids = static_cast<const int32_t*>(ids.ptr);
  a.weights = static_cast<const float*>(weights.ptr);
  a.top_k = top_k;
  a.gate = gate.DeviceMatrix();
  a.up = up.DeviceMatrix();
  a.down = down.DeviceMatrix();
  a.limit = limit;
  a.y_stride = gate.in;
  return a;
}

using Param = std::tuple<GgmlType, GgmlType, int64_t, float>;  // gate/up type, down type, T, limit

// With this many tokens every token picks experts 0..K-1 (in shuffled slots): each picked expert
// gets all T pairs, several chunks of a grouped tensor-core kernel's CTA.
constexpr int64_t kSkewedTokens = 130;
// A decode-sized case (the grouped GEMV) at the real down width: 1280 = 5 blocks per down row,
// where the short-row mapping's default ring holds a whole row (STEPSERVE_GROUPED_SHORT_DEPTH).
constexpr int64_t kRealWidthDecodeTokens = 48;
// A decode batch with long gate / up rows (2048 = 8 IQ4_XS blocks, not a short row) over 128
// experts, top 8: 128 expert slots, so the gate / up pair (MoeGemvCudaGateUpPair 1) runs at its
// 48 CTAs a slot and matrix.
constexpr int64_t kLongRowDecodeTokens = 16;

// Sets the grouped-GEMM mode for a scope (ASSERTs return early) and restores it.
struct GroupedGemmScope {
  GroupedGemmMode was;
  explicit GroupedGemmScope(GroupedGemmMode mode) : was(SetGroupedGemmCuda(mode)) {}
  ~GroupedGemmScope() { SetGroupedGemmCuda(was); }
};

// The same for the grouped GEMM's F16 form.
struct GroupedGemmF16Scope {
  GroupedGemmF16Mode was;
  explicit GroupedGemmF16Scope(GroupedGemmF16Mode mode) : was(SetGroupedGemmF16Cuda(mode)) {}
  ~GroupedGemmF16Scope() { SetGroupedGemmF16Cuda(was); }
};

// Sets the one-launch gate / up pair of the grouped GEMV for a scope and restores it.
struct GateUpPairScope {
  int was;
  explicit GateUpPairScope(bool on) : was(SetMoeGemvCudaGateUpPair(on ? 1 : 0)) {}
  ~GateUpPairScope() { SetMoeGemvCudaGateUpPair(was); }
};

// Sets the grouped GEMV's fixed-block-count IQ4_XS kernels (SetGemvCudaGroupedWhole: 1 the
// five-block short rows, 2 the 16-block long rows) for a scope.
struct GroupedWholeScope {
  int was;
  explicit GroupedWholeScope(int mask) : was(SetGemvCudaGroupedWhole(mask)) {}
  ~GroupedWholeScope() { SetGemvCudaGroupedWhole(was); }
};

// Turns the low-bit GEMV types on for a case (GemvCudaSupports, hence MoeGemvCudaSupports).
struct LowBitScope {
  bool was = SetGemvCudaLowBitTypes(true);
  ~LowBitScope() { SetGemvCudaLowBitTypes(was); }
};

class MoeGemvCudaTest : public ::testing::TestWithParam<Param> {};

TEST_P(MoeGemvCudaTest, MatchesReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible; GPU test skipped";
  const auto [gu_type, down_type, tokens, limit] = GetParam();
  const LowBitScope low_bit;
  // Past kMoeGemvMaxTokens (IQ4_XS only: the grouped tensor-core GEMV, ~60 pairs per expert
  // here) the real model's odd block counts: 768 = 3 and 1280 = 5 blocks of 256 per row, so the
  // kernel's last pair of blocks holds one block.
  const bool many = tokens > kMoeGemvMaxTokens;
  const bool real_width = many || tokens == kRealWidthDecodeTokens;
  const bool long_rows = tokens == kLongRowDecodeTokens && gu_type == GgmlType::kIQ4_XS;
  const int64_t d = long_rows ? 2048 : (real_width ? 768 : 512);
  const int64_t ff = real_width ? 1280 : 256 + 256 * (down_type == GgmlType::kQ8_0 ? 0 : 1);
  const int64_t E = long_rows ? 128 : 16, K = long_rows ? 8 : 4;
  Experts gate(gu_type, d, ff, E, 11), up(gu_type, d, ff, E, 12), down(down_type, ff, d, E, 13);

  std::mt19937 rng(static_cast<uint32_t>(tokens * 31 + 7));
  std::vector<int32_t> ids(tokens * K);
  std::vector<float> weights(tokens * K);
  std::vector<int32_t> pool(E - 3);  // experts E-3 .. E-1 are never picked
  std::iota(pool.begin(), pool.end(), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(pool.begin(), pool.end(), rng);
    if (tokens == kSkewedTokens) std::iota(pool.begin(), pool.begin() + K, 0);
    if (tokens == kSkewedTokens) std::shuffle(pool.begin(), pool.begin() + K, rng);
    for (int64_t k = 0; k < K; ++k) {
      ids[t * K + k] = pool[k];
      weights[t * K + k] = std::uniform_real_distribution<float>(0.05f, 0.6f)(rng);
    }
  }
  const int64_t x_stride = d + 8;
  std::vector<float> x = testing::RandomVector(tokens * x_stride, 100 + tokens);
  std::vector<float> y0 = testing::RandomVector(tokens * d, 200 + tokens, 0.1f);

  std::vector<float> ref = y0;
  ASSERT_EQ(
      MoeExpertsRef(HostArgs(gate, up, down, x, x_stride, tokens, ids, weights, K, limit, &ref)),
      KernelStatus::kOk);

  // IQ4_XS projections also run through the grouped GEMM (SetGroupedGemmCuda), in its F16 form
  // (the default) and its int8 form (SetGroupedGemmF16Cuda kOff): past kMoeGemvMaxTokens where
  // it replaces the grouped tensor-core GEMV (kManyGroups), and at every token count in place of
  // the dp4a grouped GEMV too (kAlways; one token is never grouped). Q4_K experts take the F16
  // GEMM only from its kIq4XsAndQ4K mode, Q6_K ones only in kAll, which is also what lets
  // MoeGemvCuda take many tokens (so many tokens of those run in those modes only; gate/up and
  // down may then differ in type and activation order: IQ4_XS / Q6_K, Q4_K / Q6_K).
  using F16Mode = GroupedGemmF16Mode;
  const bool q4k = gu_type == GgmlType::kQ4_K && down_type == GgmlType::kQ4_K;
  const bool q6k = down_type == GgmlType::kQ6_K;
  const bool all_iq4 = gu_type == GgmlType::kIQ4_XS && down_type == GgmlType::kIQ4_XS;
  std::vector<std::pair<GroupedGemmMode, F16Mode>> modes;
  if (!many || all_iq4) modes.push_back({GroupedGemmMode::kOff, F16Mode::kIq4Xs});
  if ((gu_type == GgmlType::kIQ4_XS || down_type == GgmlType::kIQ4_XS) && (!many || all_iq4)) {
    for (const F16Mode f16 : {F16Mode::kIq4Xs, F16Mode::kOff}) {
      if (many) modes.push_back({GroupedGemmMode::kManyGroups, f16});
      modes.push_back({GroupedGemmMode::kAlways, f16});
    }
  }
  if (q4k) {
    if (many) modes.push_back({GroupedGemmMode::kManyGroups, F16Mode::kIq4XsAndQ4K});
    modes.push_back({GroupedGemmMode::kAlways, F16Mode::kIq4XsAndQ4K});
  }
  // The 2-3 bit types' F16 decoders (gemm_f16_decoders_grid.cuh) are in kAll too.
  const bool low_bit_types = GemvCudaLowBitType(gu_type) || GemvCudaLowBitType(down_type);
  if (q6k || low_bit_types) {
    if (many) modes.push_back({GroupedGemmMode::kManyGroups, F16Mode::kAll});
    modes.push_back({GroupedGemmMode::kAlways, F16Mode::kAll});
  }
  // The dp4a grouped GEMV (kOff) also with the gate and up as one launch
  // (SetMoeGemvCudaGateUpPair): the same bits as two launches. Only long rows take the pair
  // (kLongRowDecodeTokens); elsewhere the second run checks that the fallback is the two launches.
  std::vector<std::tuple<GroupedGemmMode, F16Mode, bool>> runs;
  for (const auto& [mode, f16_mode] : modes) {
    runs.push_back({mode, f16_mode, false});
    if (mode == GroupedGemmMode::kOff) runs.push_back({mode, f16_mode, true});
  }
  std::vector<float> two_launches;
  for (const auto& [mode, f16_mode, pair] : runs) {
    const GroupedGemmScope scope(mode);
    const GroupedGemmF16Scope f16_scope(f16_mode);
    const GateUpPairScope pair_scope(pair);
    const int f16 = static_cast<int>(f16_mode);
    const int gemm = static_cast<int>(mode);
    auto dx = ToDevice(x), dy = ToDevice(y0), dids = ToDevice(ids), dw = ToDevice(weights);
    const int64_t ws = MoeGemvCudaWorkspaceBytes(tokens, K, d, ff);
    DeviceBuffer workspace(static_cast<size_t>(ws));
    ASSERT_EQ(cudaMemset(workspace.ptr, 0xFF, ws), cudaSuccess);  // poison (NaN floats)
    MoeGemvCudaArgs a = DeviceArgs(gate, up, down, *dx, x_stride, tokens, *dids, *dw, K, limit);
    a.y = static_cast<float*>(dy->ptr);
    a.workspace = workspace.ptr;
    a.workspace_bytes = ws;
    const int64_t pair_launches = MoeGemvCudaGateUpPairLaunches();
    ASSERT_EQ(MoeGemvCuda(a, nullptr), KernelStatus::kOk);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    // The pair must have run where it applies (a silent fallback would compare equal).
    if (long_rows) {
      EXPECT_EQ(MoeGemvCudaGateUpPairLaunches() - pair_launches, pair ? 1 : 0);
    }
    std::vector<float> got(tokens * d);
    ASSERT_EQ(cudaMemcpy(got.data(), dy->ptr, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    // Compare the update (y - y0), not y: y0 would dilute the error.
    std::vector<float> got_delta(got.size()), ref_delta(got.size());
    for (size_t i = 0; i < got.size(); ++i) {
      got_delta[i] = got[i] - y0[i];
      ref_delta[i] = ref[i] - y0[i];
    }
    const double err = testing::RelError(got_delta, ref_delta);
    EXPECT_LT(err, kMaxRelError) << GgmlTypeName(gu_type) << "/" << GgmlTypeName(down_type)
                                 << " tokens " << tokens << " limit " << limit << " gemm " << gemm
                                 << " f16 " << f16 << " pair " << pair;
    if (mode == GroupedGemmMode::kOff && !pair) two_launches = got;
    if (pair) {
      EXPECT_EQ(std::memcmp(got.data(), two_launches.data(), got.size() * 4), 0)
          << "gate and up in one launch differ from two launches: " << GgmlTypeName(gu_type)
          << " tokens " << tokens;
    }
    std::printf("moe_gemv %s/%s tokens=%ld limit=%g gemm=%d f16=%d pair=%d rel_error=%.3g\n",
                std::string(GgmlTypeName(gu_type)).c_str(),
                std::string(GgmlTypeName(down_type)).c_str(), static_cast<long>(tokens), limit,
                gemm, f16, pair ? 1 : 0, err);
  }
}

INSTANTIATE_TEST_SUITE_P(
    TypesAndTokens, MoeGemvCudaTest,
    ::testing::Values(Param{GgmlType::kQ4_K, GgmlType::kQ4_K, 1, 0.0f},
                      Param{GgmlType::kIQ4_XS, GgmlType::kIQ4_XS, 1, 7.0f},
                      Param{GgmlType::kIQ4_XS, GgmlType::kQ6_K, 5, 7.0f},
                      Param{GgmlType::kQ8_0, GgmlType::kQ8_0, 16, 0.0f},
                      Param{GgmlType::kQ4_K, GgmlType::kQ6_K, 64, 0.5f},
                      Param{GgmlType::kIQ4_XS, GgmlType::kIQ4_XS, 97, 0.0f},
                      Param{GgmlType::kIQ4_XS, GgmlType::kIQ4_XS, 200, 7.0f},
                      Param{GgmlType::kIQ4_XS, GgmlType::kIQ4_XS, kSkewedTokens, 0.0f},
                      Param{GgmlType::kQ4_K, GgmlType::kQ4_K, 200, 7.0f},
                      Param{GgmlType::kQ4_K, GgmlType::kQ4_K, kSkewedTokens, 0.0f},
                      // The Q4_K_M mix's layers with Q6_K expert `down` (and an IQ4_XS mix with
                      // them): 1280-wide down rows (5 blocks, 1050 bytes padded to 1056), blocks
                      // 0, 2, .., 8 bytes past a 16-byte boundary (Q6KF16Decoder's shifts).
                      Param{GgmlType::kQ4_K, GgmlType::kQ6_K, 200, 7.0f},
                      Param{GgmlType::kQ4_K, GgmlType::kQ6_K, kSkewedTokens, 0.0f},
                      Param{GgmlType::kIQ4_XS, GgmlType::kQ6_K, 200, 7.0f},
                      Param{GgmlType::kIQ4_XS, GgmlType::kQ6_K, kSkewedTokens, 0.0f},
                      // The published files' 2-3 bit experts (gemv_q8x_pieces_low_bit.cuh):
                      // Step-5 (IQ2_XXS / Q2_K), Step-3.7 (IQ2_XXS / Q4_K), Step-3.5-Flash
                      // (IQ3_S / IQ4_XS), and the other two types.
                      Param{GgmlType::kIQ2_XXS, GgmlType::kQ2_K, 1, 7.0f},
                      Param{GgmlType::kIQ2_XXS, GgmlType::kQ2_K, 6, 0.0f},
                      Param{GgmlType::kIQ2_XXS, GgmlType::kQ4_K, 2, 0.0f},
                      Param{GgmlType::kIQ3_S, GgmlType::kIQ4_XS, 1, 7.0f},
                      Param{GgmlType::kIQ3_S, GgmlType::kIQ4_XS, 16, 0.0f},
                      Param{GgmlType::kIQ3_XXS, GgmlType::kQ3_K, 3, 0.5f},
                      Param{GgmlType::kQ2_K, GgmlType::kQ3_K, 64, 0.0f},
                      // Prefill chunks of them through the grouped F16 GEMM's decoders.
                      Param{GgmlType::kIQ3_S, GgmlType::kIQ4_XS, 200, 7.0f},
                      Param{GgmlType::kIQ2_XXS, GgmlType::kQ2_K, 200, 0.0f},
                      Param{GgmlType::kIQ3_XXS, GgmlType::kIQ3_XXS, kSkewedTokens, 0.0f},
                      Param{GgmlType::kQ2_K, GgmlType::kQ3_K, 97, 0.5f},
                      // The community IQ2_S card's mix (gate/up IQ2_XS, down IQ3_XXS), and IQ2_S.
                      Param{GgmlType::kIQ2_XS, GgmlType::kIQ3_XXS, 1, 7.0f},
                      Param{GgmlType::kIQ2_XS, GgmlType::kIQ3_XXS, 200, 0.0f},
                      Param{GgmlType::kIQ2_S, GgmlType::kIQ2_S, 5, 0.0f},
                      Param{GgmlType::kIQ2_S, GgmlType::kIQ3_S, 97, 7.0f},
                      Param{GgmlType::kIQ4_XS, GgmlType::kIQ4_XS, kRealWidthDecodeTokens, 7.0f},
                      Param{GgmlType::kIQ4_XS, GgmlType::kIQ4_XS, kLongRowDecodeTokens, 7.0f}));

// One token through MoeGemvCuda's two-kernel path (moe_decode_cuda.h; counters given) against
// the reference and against the five-launch path (SetMoeGemvCudaDecodeFusedTokens(0)): the gate,
// up, SwiGLU and int8 steps are the same arithmetic, only the down combine sums in another order,
// so the two agree to float rounding. Twice in a row (the counters must come back to zero), and
// with ids out of range (zero contribution, as the five-launch path gives).
// + n_embd, n_ff, limit, tokens
using DecodeParam = std::tuple<GgmlType, GgmlType, int64_t, int64_t, float, int64_t>;

// Up to how many tokens the two-kernel path runs, for a scope.
struct DecodeFusedScope {
  int64_t was;
  explicit DecodeFusedScope(int64_t tokens) : was(SetMoeGemvCudaDecodeFusedTokens(tokens)) {}
  ~DecodeFusedScope() { SetMoeGemvCudaDecodeFusedTokens(was); }
};

// Whether the IQ4_XS gate / up kernel runs its whole iterations unguarded, for a scope.
struct GateUpWholeScope {
  bool was;
  explicit GateUpWholeScope(bool on) : was(SetMoeGemvCudaGateUpWhole(on)) {}
  ~GateUpWholeScope() { SetMoeGemvCudaGateUpWhole(was); }
};

class MoeGemvCudaDecodeTest : public ::testing::TestWithParam<DecodeParam> {};

TEST_P(MoeGemvCudaDecodeTest, TwoKernelPathMatchesReferenceAndFiveLaunchPath) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible; GPU test skipped";
  const auto [gu_type, down_type, d, ff, limit, T] = GetParam();
  const LowBitScope low_bit;
  const int64_t E = 16, K = 8;
  Experts gate(gu_type, d, ff, E, 21), up(gu_type, d, ff, E, 22), down(down_type, ff, d, E, 23);
  std::mt19937 rng(static_cast<uint32_t>(d + ff + T));
  std::vector<int32_t> ids(T * K);  // distinct per token; tokens share some experts
  std::vector<int32_t> pool(E);
  std::iota(pool.begin(), pool.end(), 0);
  for (int64_t t = 0; t < T; ++t) {
    std::shuffle(pool.begin(), pool.end(), rng);
    std::copy(pool.begin(), pool.begin() + K, ids.begin() + t * K);
  }
  std::vector<float> weights(T * K);
  for (float& w : weights) w = std::uniform_real_distribution<float>(0.05f, 0.6f)(rng);
  const int64_t x_stride = d + 8, n = T * d;
  const std::vector<float> x = testing::RandomVector(T * x_stride, 300 + d);
  const std::vector<float> y0 = testing::RandomVector(n, 400 + d, 0.1f);
  std::vector<float> ref = y0;
  ASSERT_EQ(MoeExpertsRef(HostArgs(gate, up, down, x, x_stride, T, ids, weights, K, limit, &ref)),
            KernelStatus::kOk);

  auto dx = ToDevice(x), dw = ToDevice(weights);
  // Sized for K + 1 slots per token: the shared expert's run below takes one more.
  const int64_t ws = MoeGemvCudaWorkspaceBytes(T, K + 1, d, ff);
  DeviceBuffer workspace(static_cast<size_t>(ws));
  const int64_t n_counters = MoeGemvCudaCounterInts(T, K + 1, ff);
  DeviceBuffer counters(static_cast<size_t>(n_counters * 4));
  ASSERT_EQ(cudaMemset(counters.ptr, 0, n_counters * 4), cudaSuccess);
  // y after MoeGemvCuda on `a` from y_in (a's y, workspace and counters set here), the workspace
  // poisoned first.
  auto call = [&](MoeGemvCudaArgs a, const std::vector<float>& y_in) {
    auto dy = ToDevice(y_in);
    EXPECT_EQ(cudaMemset(workspace.ptr, 0xFF, ws), cudaSuccess);
    a.y = static_cast<float*>(dy->ptr);
    a.workspace = workspace.ptr;
    a.workspace_bytes = ws;
    a.counters = static_cast<int32_t*>(counters.ptr);
    EXPECT_EQ(MoeGemvCuda(a, nullptr), KernelStatus::kOk);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> y(n);
    EXPECT_EQ(cudaMemcpy(y.data(), dy->ptr, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return y;
  };
  auto minus_y0 = [&](std::vector<float> y) {
    for (int64_t i = 0; i < n; ++i) y[i] -= y0[i];
    return y;
  };
  // y - y0 for the routed experts with `call_ids`, through the two-kernel path or not.
  auto run = [&](bool fused, const std::vector<int32_t>& call_ids) {
    const DecodeFusedScope scope(fused ? kMoeGemvFusedMaxTokens : 0);
    auto dids = ToDevice(call_ids);
    return minus_y0(call(DeviceArgs(gate, up, down, *dx, x_stride, T, *dids, *dw, K, limit), y0));
  };
  auto counters_zero = [&] {
    std::vector<int32_t> c(n_counters);
    EXPECT_EQ(cudaMemcpy(c.data(), counters.ptr, n_counters * 4, cudaMemcpyDeviceToHost),
              cudaSuccess);
    return std::all_of(c.begin(), c.end(), [](int32_t v) { return v == 0; });
  };
  std::vector<float> ref_delta(n);
  for (int64_t i = 0; i < n; ++i) ref_delta[i] = ref[i] - y0[i];
  const std::vector<float> fused = run(true, ids);
  EXPECT_TRUE(counters_zero());
  const std::vector<float> again = run(true, ids);
  const std::vector<float> five = run(false, ids);
  const double err = testing::RelError(fused, ref_delta);
  const double vs_five = testing::RelError(fused, five);
  EXPECT_LT(err, kMaxRelError);
  EXPECT_LT(vs_five, 1e-5);
  EXPECT_EQ(std::memcmp(fused.data(), again.data(), n * 4), 0) << "second call differs";
  // IQ4_XS gate / up at 1-2 tokens with whole iterations free of per-step guards
  // (STEPSERVE_MOE_GATE_UP_WHOLE, the default) and without: the same arithmetic in the same
  // order, so the same bits.
  if (gu_type == GgmlType::kIQ4_XS) {
    std::vector<float> guarded, whole;
    {
      const GateUpWholeScope off(false);
      guarded = run(true, ids);
    }
    {
      const GateUpWholeScope on(true);
      whole = run(true, ids);
    }
    EXPECT_EQ(std::memcmp(guarded.data(), whole.data(), n * 4), 0)
        << "the whole-iteration gate / up kernel differs from the guarded one";
  }
  // The five-launch path's grouped GEMV with the IQ4_XS kernels compiled for the real block
  // counts (STEPSERVE_GROUPED_WHOLE 3, the default: the 4096-wide gate / up, 16 blocks, and the
  // 1280-wide down, 5) and without (0): the same bits, and the launches must have taken the
  // kernels asked for (one token is not grouped).
  if (gu_type == GgmlType::kIQ4_XS && down_type == GgmlType::kIQ4_XS && d == 4096 && ff == 1280 &&
      T > 1) {
    std::vector<float> guarded, whole;
    {
      const GroupedWholeScope guarded_kernels(0);
      const int64_t launches = GemvCudaGroupedWholeLaunches();
      guarded = run(false, ids);
      EXPECT_EQ(GemvCudaGroupedWholeLaunches() - launches, 0);
    }
    {
      const GroupedWholeScope whole_kernels(3);
      const int64_t launches = GemvCudaGroupedWholeLaunches();
      whole = run(false, ids);
      EXPECT_EQ(GemvCudaGroupedWholeLaunches() - launches, MoeGemvCudaGateUpPair() != 0 ? 2 : 3);
    }
    EXPECT_EQ(std::memcmp(whole.data(), guarded.data(), n * 4), 0)
        << "the grouped GEMV's fixed-block kernels differ from the guarded ones, tokens " << T;
  }
  // Two ids out of range: no contribution from those slots, in both paths.
  std::vector<int32_t> bad = ids;
  bad[1] = -1;
  bad[T * K - 2] = static_cast<int32_t>(E + 3);
  const double bad_vs_five = testing::RelError(run(true, bad), run(false, bad));
  EXPECT_LT(bad_vs_five, 1e-5);
  EXPECT_TRUE(counters_zero());
  std::printf(
      "moe_decode %s/%s d=%ld ff=%ld tokens=%ld rel_error=%.3g vs_five_launch=%.3g "
      "bad_ids=%.3g\n",
      std::string(GgmlTypeName(gu_type)).c_str(), std::string(GgmlTypeName(down_type)).c_str(),
      static_cast<long>(d), static_cast<long>(ff), static_cast<long>(T), err, vs_five, bad_vs_five);

  // The shared expert as one more slot per token (from 3 tokens decoded once for all of them;
  // another clamp than the routed one), against
  // the reference of the routed experts plus the shared one as a one-matrix expert set, and
  // against the routed call followed by the shared expert as a routed expert of its own (id 0,
  // weight 1).
  Experts sg(gu_type, d, ff, 1, 31), su(gu_type, d, ff, 1, 32), sd(down_type, ff, d, 1, 33);
  const float shared_limit = limit > 0.0f ? 0.0f : 16.0f;
  auto dids = ToDevice(ids);
  const DecodeFusedScope all_tokens(kMoeGemvFusedMaxTokens);  // 3-4 tokens too
  MoeGemvCudaArgs with_shared = DeviceArgs(gate, up, down, *dx, x_stride, T, *dids, *dw, K, limit);
  with_shared.has_shared = true;
  with_shared.shared_gate = sg.DeviceMatrix();
  with_shared.shared_up = su.DeviceMatrix();
  with_shared.shared_down = sd.DeviceMatrix();
  with_shared.shared_limit = shared_limit;
  with_shared.workspace = workspace.ptr;
  with_shared.workspace_bytes = ws;
  with_shared.counters = static_cast<int32_t*>(counters.ptr);
  with_shared.y = static_cast<float*>(dx->ptr);  // validation only; `call` sets the real one
  if (!MoeGemvCudaTakesShared(gu_type, down_type, T, ff)) {
    EXPECT_EQ(ValidateMoeGemvCuda(with_shared), KernelStatus::kInvalidArgument);
    return;
  }
  const std::vector<int32_t> zero_ids(T, 0);
  const std::vector<float> unit_weights(T, 1.0f);
  ASSERT_EQ(MoeExpertsRef(HostArgs(sg, su, sd, x, x_stride, T, zero_ids, unit_weights, 1,
                                   shared_limit, &ref)),
            KernelStatus::kOk);  // ref += the shared expert
  for (int64_t i = 0; i < n; ++i) ref_delta[i] = ref[i] - y0[i];
  const std::vector<float> got = minus_y0(call(with_shared, y0));
  EXPECT_TRUE(counters_zero());
  auto d_zero = ToDevice(zero_ids), d_unit = ToDevice(unit_weights);
  std::vector<float> routed_y = fused;  // y after the routed call
  for (int64_t i = 0; i < n; ++i) routed_y[i] += y0[i];
  const std::vector<float> two_calls = minus_y0(
      call(DeviceArgs(sg, su, sd, *dx, x_stride, T, *d_zero, *d_unit, 1, shared_limit), routed_y));
  const double shared_err = testing::RelError(got, ref_delta);
  const double vs_two_calls = testing::RelError(got, two_calls);
  EXPECT_LT(shared_err, kMaxRelError);
  EXPECT_LT(vs_two_calls, 1e-5);
  std::printf("moe_decode shared %s/%s d=%ld ff=%ld tokens=%ld rel_error=%.3g vs_two_calls=%.3g\n",
              std::string(GgmlTypeName(gu_type)).c_str(),
              std::string(GgmlTypeName(down_type)).c_str(), static_cast<long>(d),
              static_cast<long>(ff), static_cast<long>(T), shared_err, vs_two_calls);
}

INSTANTIATE_TEST_SUITE_P(
    TypesAndShapes, MoeGemvCudaDecodeTest,
    ::testing::Values(DecodeParam{GgmlType::kIQ4_XS, GgmlType::kIQ4_XS, 4096, 1280, 7.0f, 1},
                      DecodeParam{GgmlType::kIQ4_XS, GgmlType::kIQ4_XS, 4096, 1280, 0.0f, 2},
                      // 3-4 tokens: the shared expert's rows decoded once for all tokens.
                      DecodeParam{GgmlType::kIQ4_XS, GgmlType::kIQ4_XS, 4096, 1280, 0.0f, 4},
                      DecodeParam{GgmlType::kIQ4_XS, GgmlType::kIQ4_XS, 768, 256, 0.0f, 1},
                      DecodeParam{GgmlType::kQ4_K, GgmlType::kQ4_K, 768, 512, 0.0f, 1},
                      DecodeParam{GgmlType::kQ4_K, GgmlType::kQ4_K, 768, 512, 7.0f, 3},
                      DecodeParam{GgmlType::kQ5_K, GgmlType::kQ5_K, 512, 256, 7.0f, 2},
                      DecodeParam{GgmlType::kQ8_0, GgmlType::kQ8_0, 544, 96, 0.5f, 1},
                      // Q6_K down (the Q4_K_M files' more-bits layers) through the down + combine
                      // kernel (4 tokens: the shared expert's Q6_K rows decoded once for all; Q6_K
                      // gate and up) - or with STEPSERVE_MOE_DECODE_Q6K=0 gate/up fused and the
                      // streamed down GEMV reading their int8 rows.
                      DecodeParam{GgmlType::kIQ4_XS, GgmlType::kQ6_K, 512, 1280, 7.0f, 1},
                      DecodeParam{GgmlType::kQ4_K, GgmlType::kQ6_K, 512, 1280, 0.0f, 2},
                      DecodeParam{GgmlType::kQ4_K, GgmlType::kQ6_K, 512, 1280, 7.0f, 4},
                      DecodeParam{GgmlType::kQ6_K, GgmlType::kQ6_K, 512, 1280, 0.0f, 3},
                      // The published files' 2-3 bit experts (gemv_q8x_pieces_low_bit.cuh).
                      DecodeParam{GgmlType::kIQ3_S, GgmlType::kIQ4_XS, 4096, 1280, 7.0f, 1},
                      DecodeParam{GgmlType::kIQ2_XXS, GgmlType::kQ2_K, 4096, 1280, 0.0f, 2},
                      DecodeParam{GgmlType::kIQ3_XXS, GgmlType::kQ3_K, 768, 512, 7.0f, 1},
                      DecodeParam{GgmlType::kQ2_K, GgmlType::kIQ3_S, 512, 256, 0.0f, 4},
                      DecodeParam{GgmlType::kIQ2_XS, GgmlType::kIQ3_XXS, 4096, 1280, 7.0f, 1},
                      DecodeParam{GgmlType::kIQ2_S, GgmlType::kIQ2_S, 768, 512, 0.0f, 2}));

TEST(MoeGemvCudaValidateTest, RejectsBadArguments) {
  MoeGemvCudaArgs a;
  a.gate.type = a.up.type = a.down.type = GgmlType::kF32;
  EXPECT_EQ(ValidateMoeGemvCuda(a), KernelStatus::kUnsupportedType);
  a.gate.type = a.up.type = a.down.type = GgmlType::kQ4_K;
  EXPECT_EQ(ValidateMoeGemvCuda(a), KernelStatus::kInvalidArgument);  // null pointers
  a.up.type = GgmlType::kQ8_0;
  EXPECT_EQ(ValidateMoeGemvCuda(a), KernelStatus::kUnsupportedType);  // gate/up types differ
}

// A non-null argument set (never dereferenced: validation only) of `tokens` tokens, n_embd = n_ff
// = 256, 16 experts, top 4, with a workspace large enough for 65 tokens.
MoeGemvCudaArgs ValidationArgs(GgmlType gate_up, GgmlType down, int64_t tokens) {
  MoeGemvCudaArgs a;
  a.gate.type = a.up.type = gate_up;
  a.down.type = down;
  static float dummy[4];
  static int32_t dummy_ids[4];
  a.x = a.weights = dummy;
  a.y = dummy;
  a.ids = dummy_ids;
  a.workspace = reinterpret_cast<void*>(uintptr_t{256});
  a.n_embd = a.x_stride = a.y_stride = 256;
  a.n_ff = 256;
  a.n_experts = 16;
  a.top_k = 4;
  a.tokens = tokens;
  a.workspace_bytes = MoeGemvCudaWorkspaceBytes(kMoeGemvMaxTokens + 1, 4, 256, 256);
  return a;
}

TEST(MoeGemvCudaValidateTest, ManyTokensOnlyForIq4Xs) {
  // In the IQ4_XS-only mode of the F16 GEMM (the default, kAll, also takes Q4_K and Q6_K).
  const GroupedGemmF16Scope scope(GroupedGemmF16Mode::kIq4Xs);
  EXPECT_TRUE(MoeGemvCudaSupportsManyTokens(GgmlType::kIQ4_XS, GgmlType::kIQ4_XS));
  EXPECT_FALSE(MoeGemvCudaSupportsManyTokens(GgmlType::kQ4_K, GgmlType::kQ4_K));
  EXPECT_FALSE(MoeGemvCudaSupportsManyTokens(GgmlType::kIQ4_XS, GgmlType::kQ6_K));
  // A non-null argument set that is valid at 64 tokens is refused at 65 for Q4_K.
  MoeGemvCudaArgs a = ValidationArgs(GgmlType::kQ4_K, GgmlType::kQ4_K, kMoeGemvMaxTokens);
  EXPECT_EQ(ValidateMoeGemvCuda(a), KernelStatus::kOk);
  a.tokens = kMoeGemvMaxTokens + 1;
  EXPECT_EQ(ValidateMoeGemvCuda(a), KernelStatus::kInvalidArgument);
  a.gate.type = a.up.type = a.down.type = GgmlType::kIQ4_XS;
  EXPECT_EQ(ValidateMoeGemvCuda(a), KernelStatus::kOk);
}

TEST(MoeGemvCudaValidateTest, ManyTokensForQ4KWithTheF16GemmOnly) {
  const GroupedGemmF16Scope scope(GroupedGemmF16Mode::kIq4XsAndQ4K);
  EXPECT_TRUE(MoeGemvCudaSupportsManyTokens(GgmlType::kQ4_K, GgmlType::kQ4_K));
  EXPECT_FALSE(MoeGemvCudaSupportsManyTokens(GgmlType::kQ4_K, GgmlType::kQ6_K));
  {
    const GroupedGemmScope off(GroupedGemmMode::kOff);  // no grouped GEMM: no F16 form either
    EXPECT_FALSE(MoeGemvCudaSupportsManyTokens(GgmlType::kQ4_K, GgmlType::kQ4_K));
  }
  SetGroupedGemmF16Cuda(GroupedGemmF16Mode::kIq4Xs);
  EXPECT_FALSE(MoeGemvCudaSupportsManyTokens(GgmlType::kQ4_K, GgmlType::kQ4_K));
}

TEST(MoeGemvCudaValidateTest, ManyTokensForQ6KDownInTheAllModeOnly) {
  const GroupedGemmF16Scope scope(GroupedGemmF16Mode::kAll);
  EXPECT_TRUE(MoeGemvCudaSupportsManyTokens(GgmlType::kQ4_K, GgmlType::kQ6_K));
  EXPECT_TRUE(MoeGemvCudaSupportsManyTokens(GgmlType::kIQ4_XS, GgmlType::kQ6_K));
  EXPECT_TRUE(MoeGemvCudaSupportsManyTokens(GgmlType::kQ4_K, GgmlType::kQ4_K));
  EXPECT_FALSE(MoeGemvCudaSupportsManyTokens(GgmlType::kQ8_0, GgmlType::kQ6_K));  // no decoder
  // 65 tokens of the Q4_K_M mix's Q6_K-down layers: valid in kAll only.
  const MoeGemvCudaArgs a = ValidationArgs(GgmlType::kQ4_K, GgmlType::kQ6_K, kMoeGemvMaxTokens + 1);
  EXPECT_EQ(ValidateMoeGemvCuda(a), KernelStatus::kOk);
  {
    const GroupedGemmScope off(GroupedGemmMode::kOff);  // no grouped GEMM: no F16 form either
    EXPECT_FALSE(MoeGemvCudaSupportsManyTokens(GgmlType::kQ4_K, GgmlType::kQ6_K));
    EXPECT_EQ(ValidateMoeGemvCuda(a), KernelStatus::kInvalidArgument);
  }
  SetGroupedGemmF16Cuda(GroupedGemmF16Mode::kIq4XsAndQ4K);  // Q6_K not decoded
  EXPECT_FALSE(MoeGemvCudaSupportsManyTokens(GgmlType::kQ4_K, GgmlType::kQ6_K));
  EXPECT_FALSE(MoeGemvCudaSupportsManyTokens(GgmlType::kIQ4_XS, GgmlType::kQ6_K));
  EXPECT_EQ(ValidateMoeGemvCuda(a), KernelStatus::kInvalidArgument);
}

// The two-kernel path's token limit and when a shared expert is taken (host logic, no device).
TEST(MoeGemvCudaValidateTest, GateUpPairModesClamp) {
  const GateUpPairScope scope(false);
  EXPECT_EQ(SetMoeGemvCudaGateUpPair(7), 0);
  EXPECT_EQ(MoeGemvCudaGateUpPair(), 2);  // clamped to "up to kMoeGemvGateUpPairTokens"
  SetMoeGemvCudaGateUpPair(-3);
  EXPECT_EQ(MoeGemvCudaGateUpPair(), 0);
}

TEST(MoeGemvCudaValidateTest, DecodeTokenLimitAndSharedExpert) {
  const DecodeFusedScope scope(2);  // the default, whatever the environment says
  EXPECT_EQ(SetMoeGemvCudaDecodeFusedTokens(-1), 2);
  EXPECT_EQ(MoeGemvCudaDecodeFusedTokens(), 0);  // clamped
  SetMoeGemvCudaDecodeFusedTokens(9);
  EXPECT_EQ(MoeGemvCudaDecodeFusedTokens(), kMoeGemvFusedMaxTokens);
  SetMoeGemvCudaDecodeFusedTokens(2);
  constexpr GgmlType kIq4 = GgmlType::kIQ4_XS;
  EXPECT_TRUE(MoeGemvCudaTakesShared(kIq4, kIq4, 1, 1280));
  EXPECT_TRUE(MoeGemvCudaTakesShared(kIq4, kIq4, 2, 1280));
  EXPECT_FALSE(MoeGemvCudaTakesShared(kIq4, kIq4, 3, 1280));  // past the limit
  EXPECT_FALSE(MoeGemvCudaTakesShared(kIq4, kIq4, 1, 1296));  // n_ff not in 32-row blocks
  EXPECT_FALSE(MoeGemvCudaTakesShared(kIq4, GgmlType::kQ4_0, 1, 1280));  // down not decoded
  {
    // The 2-3 bit types (on by default since session 20) only while they are turned on.
    const bool was = SetGemvCudaLowBitTypes(false);
    EXPECT_FALSE(MoeGemvCudaTakesShared(kIq4, GgmlType::kQ2_K, 1, 1280));
    SetGemvCudaLowBitTypes(true);
    EXPECT_TRUE(MoeGemvCudaTakesShared(kIq4, GgmlType::kQ2_K, 1, 1280));
    SetGemvCudaLowBitTypes(was);
  }
  EXPECT_TRUE(MoeGemvCudaTakesShared(GgmlType::kQ4_K, GgmlType::kQ5_K, 1, 1280));
  {
    const DecodeFusedScope off(0);
    EXPECT_FALSE(MoeGemvCudaTakesShared(kIq4, kIq4, 1, 1280));
  }
  {
    const DecodeFusedScope four(4);
    EXPECT_TRUE(MoeGemvCudaTakesShared(kIq4, kIq4, 4, 1280));
    EXPECT_FALSE(MoeGemvCudaTakesShared(kIq4, kIq4, 5, 1280));
  }
  EXPECT_EQ(MoeGemvCudaCounterInts(2, 9, 1280), 2 * 9 * 40);

  // Validation of a shared expert: types as the routed experts', counters, the token limit, a
  // workspace for top_k + 1 slots per token.
  MoeGemvCudaArgs a = ValidationArgs(kIq4, kIq4, 1);
  static int32_t counters[1];
  a.has_shared = true;
  a.shared_gate = a.shared_up = a.shared_down =
      ExpertMatrixCuda{kIq4, reinterpret_cast<void*>(uintptr_t{256}), 144, 0};
  a.counters = counters;
  EXPECT_EQ(ValidateMoeGemvCuda(a), KernelStatus::kOk);
  a.shared_down.type = GgmlType::kQ4_K;
  EXPECT_EQ(ValidateMoeGemvCuda(a), KernelStatus::kUnsupportedType);
  a.shared_down.type = kIq4;
  a.counters = nullptr;
  EXPECT_EQ(ValidateMoeGemvCuda(a), KernelStatus::kInvalidArgument);
  a.counters = counters;
  a.shared_up.row_bytes = 136;  // not a multiple of 16
  EXPECT_EQ(ValidateMoeGemvCuda(a), KernelStatus::kInvalidArgument);
  a.shared_up.row_bytes = 144;
  a.tokens = 3;  // past the limit of 2
  EXPECT_EQ(ValidateMoeGemvCuda(a), KernelStatus::kInvalidArgument);
  a.tokens = 1;
  a.workspace_bytes = MoeGemvCudaWorkspaceBytes(1, a.top_k, a.n_embd, a.n_ff);  // no extra slot
  EXPECT_EQ(ValidateMoeGemvCuda(a), KernelStatus::kInvalidArgument);
}

}  // namespace
}  // namespace stepserve::kernels
