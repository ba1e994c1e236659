// Runs the per-token MoE down + combine kernels of kernels/matmul/moe_decode_cuda.cu under the
// host emulator: ExpertDownLeanKernel (the slot table in shared memory, slot = i / nb by a
// multiply-high; STEPSERVE_MOE_DOWN_LEAN=1) and the cursor form ExpertDownCombineKernel<P, D,
// false> it is meant to replace, each with its weights before the PDL wait and after it. y (which
// the kernels accumulate into) is checked against a double-precision reference - the engine's
// dequantization of each slot's row dotted with the slot's int8 activations, times the router
// weight, plus the shared expert's at weight 1 - with ids out of range contributing nothing, the
// padding floats untouched; and the lean form's y must be the cursor form's bit for bit (the same
// items in the same order per lane group, the same float operations).
//   test_moe_down [copy_at_issue 0|1] [seed] [only_case]
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "emu_cuda.h"
#include "kernels/matmul/moe_decode_cuda.cu"
#include "moe_decode_stand_ins.h"
#include "test_common.h"
#include "test_quant_types.h"

using stepserve::GgmlType;
namespace gi = stepserve::kernels::gemv_internal;

struct DownCase {
  std::string name;
  GgmlType type;
  int64_t n_ff, n_embd, y_pad;
  int tokens, routed, experts;
  bool shared, bad_ids;
};

// One launch of the lean (or cursor) kernel of piece P over `a` (its y already set).
template <class P>
void LaunchDown(bool lean, const gi::ExpertDownParams& a) {
  const dim3 grid(static_cast<unsigned>((a.p.out + gi::kWarpsPerBlock - 1) / gi::kWarpsPerBlock),
                  static_cast<unsigned>(a.tokens));
  if (lean) {
    stepserve::kernels::LaunchWithPdl(gi::ExpertDownLeanKernel<P, gi::kDownDepth<P>>, grid,
                                      dim3(gi::kThreads), 0, nullptr, a);
  } else {
    stepserve::kernels::LaunchWithPdl(gi::ExpertDownCombineKernel<P, gi::kDownDepth<P>, false>,
                                      grid, dim3(gi::kThreads), 0, nullptr, a);
  }
}

void LaunchDownTyped(GgmlType type, bool lean, const gi::ExpertDownParams& a) {
  gi::WithQ8xPieceAll(type, [&](auto piece) {
    LaunchDown<decltype(piece)>(lean, a);
    return cudaSuccess;
  });
}

bool RunCase(const DownCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const EmuQuantType ti = EmuType(c.type);
  const int per_token = c.routed + (c.shared ? 1 : 0), slots = c.tokens * per_token;
  QuantMatrices experts = RandomWeights(c.experts, c.n_embd, c.n_ff, ti, rng);
  QuantMatrices shared = RandomWeights(1, c.n_embd, c.n_ff, ti, rng);
  Q8Activations act(slots, c.n_ff, ti.pair_order, rng);
  std::vector<int32_t> ids(c.tokens * c.routed);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % c.experts);
  if (c.bad_ids) {
    ids[1] = -1;
    ids[ids.size() - 2] = c.experts + 2;
  }
  std::vector<float> weights(ids.size());
  for (auto& w : weights) w = std::uniform_real_distribution<float>(0.05f, 0.6f)(rng);
  const int64_t nb = c.n_ff / 256, stride = c.n_embd + c.y_pad;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> want(c.tokens * stride, nan), scale(want.size(), 0.0);
  std::vector<float> y0(want.size(), std::numeric_limits<float>::quiet_NaN());
  for (int t = 0; t < c.tokens; ++t) {
    for (int64_t o = 0; o < c.n_embd; ++o) {
      const float v0 = std::uniform_real_distribution<float>(-1.f, 1.f)(rng);
      double sum = v0, abs_sum = std::fabs(v0);
      for (int s = 0; s < per_token; ++s) {
        const int64_t row = int64_t{t} * per_token + s;
        const uint8_t* w = nullptr;
        double weight = 1.0;
        if (s == c.routed) {
          w = shared.block(0, o, 0);
        } else {
          const int32_t id = ids[t * c.routed + s];
          weight = weights[t * c.routed + s];
          if (id >= 0 && id < c.experts) w = experts.block(id, o, 0);
        }
        if (w == nullptr) continue;
        const RowDot d =
            DotRow(ti, w, nb, act.xl.data() + row * c.n_ff, act.xd.data() + row * (c.n_ff / 32));
        sum += weight * d.acc;
        abs_sum += weight * d.abs_acc;
      }
      y0[t * stride + o] = v0;
      want[t * stride + o] = sum;
      scale[t * stride + o] = abs_sum;
    }
  }
  gi::ExpertDownParams a{};
  SetIndexedParams(experts, c.n_ff, c.n_embd, c.experts, ids.data(), ti.pair_order, act, stride,
                   &a.p);
  SetGridTables(&a.p);
  a.weights = weights.data();
  a.routed = c.routed;
  a.tokens = c.tokens;
  a.shared_down = c.shared ? shared.data() : nullptr;
  a.shared_down_row_bytes = shared.row_bytes;
  emu::ClearGlobals();
  emu::AddGlobal(experts.segments(), experts.segment_bytes());
  emu::AddGlobal(shared.segments(), shared.segment_bytes());
  emu::AddGlobal(act.xq(), slots * c.n_ff);
  emu::AddGlobal(act.xd.data(), act.xd.size() * sizeof(float2));
  emu::AddGlobal(ids.data(), ids.size() * 4);
  emu::AddGlobal(weights.data(), weights.size() * 4);
  AddGridTableGlobals();
  bool ok = true;
  std::vector<float> cursor_y;
  for (const bool early : {false, true}) {
    for (const bool lean : {false, true}) {
      std::vector<float> y = y0;
      a.p.y = y.data();
      a.weights_before_wait = early;
      LaunchDownTyped(c.type, lean, a);
      const YCheck check = CheckY(y, want, scale);
      bool same = true;
      if (!lean) cursor_y = y;
      if (lean) same = std::memcmp(y.data(), cursor_y.data(), y.size() * 4) == 0;
      std::printf(
          "%-4s %-40s %-6s early %d grid %u | checked %lld max rel %.2e | bad %lld stray %lld "
          "missing %lld%s\n",
          check.ok() && same ? "ok" : "FAIL", c.name.c_str(), lean ? "lean" : "cursor", int(early),
          emu::last_grid_x, (long long)check.checked, check.max_rel, (long long)check.bad,
          (long long)check.stray, (long long)check.missing,
          lean ? (same ? " | = cursor" : " | differs from cursor") : "");
      ok = ok && check.ok() && same;
    }
  }
  return ok;
}

int main(int argc, char** argv) {
  const auto [seed, only] = SetUpEmulation(argc, argv);
  emu::check_global_loads = true;
  const std::vector<DownCase> cases = {
      {"IQ4_XS 1280 -> 37, 1 token, shared", GgmlType::kIQ4_XS, 1280, 37, 3, 1, 8, 12, true, false},
      {"IQ4_XS 1280 -> 21, 2 tokens, bad ids", GgmlType::kIQ4_XS, 1280, 21, 0, 2, 8, 10, true,
       true},
      {"IQ4_XS 256 -> 9 (one block), 2 tokens", GgmlType::kIQ4_XS, 256, 9, 1, 2, 3, 4, false,
       false},
      {"Q4_K 1280 -> 13, 1 token, shared, bad ids", GgmlType::kQ4_K, 1280, 13, 2, 1, 8, 9, true,
       true},
      {"Q5_K 768 -> 11, 2 tokens", GgmlType::kQ5_K, 768, 11, 1, 2, 5, 6, true, false},
      {"Q6_K 1280 -> 10, 1 token, shared", GgmlType::kQ6_K, 1280, 10, 0, 1, 8, 9, true, false},
      {"Q2_K 1280 -> 9, 2 tokens, bad ids", GgmlType::kQ2_K, 1280, 9, 2, 2, 8, 9, true, true},
      {"Q3_K 512 -> 7, 1 token", GgmlType::kQ3_K, 512, 7, 1, 1, 4, 5, true, false},
      {"IQ2_XXS 1280 -> 6, 1 token", GgmlType::kIQ2_XXS, 1280, 6, 0, 1, 8, 9, true, false},
      {"IQ2_XS 768 -> 5, 2 tokens", GgmlType::kIQ2_XS, 768, 5, 1, 2, 3, 4, true, false},
      {"IQ2_S 1280 -> 7, 1 token, bad ids", GgmlType::kIQ2_S, 1280, 7, 1, 1, 8, 9, true, true},
      {"IQ3_XXS 1280 -> 6, 2 tokens", GgmlType::kIQ3_XXS, 1280, 6, 0, 2, 4, 5, true, false},
      {"IQ3_S 1280 -> 9, 1 token, shared", GgmlType::kIQ3_S, 1280, 9, 2, 1, 8, 9, true, false},
  };
  const int fails = RunCases(cases, only, seed, "moe_down ", 0, RunCase);
  return fails != 0;
}
