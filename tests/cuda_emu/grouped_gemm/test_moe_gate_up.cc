// Runs the few-token MoE gate/up kernel of kernels/matmul/moe_decode_cuda.cu (ExpertGateUpKernel,
// through its launcher LaunchExpertGateUp: one token, 2-4 tokens per token, and from 3 tokens with
// a shared expert that expert's rows decoded once for all tokens) under the host emulator. Checks:
//  - every slot's SwiGLU value (act) against a double-precision reference: the engine's
//    dequantization of the slot's gate and up rows dotted with the token's int8 activations, the
//    clamped SwiGLU (routed and shared clamps differ); ids out of range give SwiGLU(0, 0) = 0;
//  - the down GEMV's int8 activations the kernel writes as each 32-row block completes (act_q,
//    act_d, natural or pair order): the bytes and scales of the quantizer's rule applied on the
//    host to the kernel's own act values (q8_quantize.cuh: d = amax / 127, round to nearest even);
//  - the arrival counters all zero again, and nothing written past the slots' rows.
// Why: the kernel's block quantization (arrival counters, the last warp of a block reading the
// others' values) and its three grid layouts are what a change for speed can break; device time
// is scarce (session 21: one call).
//   test_moe_gate_up [copy_at_issue 0|1] [seed] [only_case]
#include <cmath>
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

struct GateUpCase {
  std::string name;
  GgmlType type;
  int64_t n_embd, n_ff;
  int tokens, routed, experts;
  bool shared, bad_ids, pair_order_out;
  float limit;  // the routed experts' clamp (0: none); the shared expert's is the other
};

double SiluD(double g) { return g / (1.0 + std::exp(-g)); }

// The clamped SwiGLU in double (ExpertSwiGlu), with a bound on its error from g and u each off by
// up to 1e-5 of their terms' magnitudes.
struct SwiGluRef {
  double value, tol;
};
SwiGluRef SwiGluD(const RowDot& g, const RowDot& u, float limit) {
  const bool clamp = limit > 0.0f;
  double uu = u.acc, act = SiluD(g.acc);
  if (clamp) {
    uu = std::fmin(std::fmax(uu, -limit), limit);
    act = std::fmin(act, double(limit));
  }
  const double v = act * uu;
  return {v, 1e-4 * std::fabs(v) +
                 1e-5 * (1.1 * g.abs_acc * std::fabs(uu) + std::fabs(act) * u.abs_acc) + 1e-30};
}

bool RunCase(const GateUpCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const EmuQuantType ti = EmuType(c.type);
  const int per_token = c.routed + (c.shared ? 1 : 0), slots = c.tokens * per_token;
  const int64_t n = c.n_ff, nb = c.n_embd / 256, blocks = n / 32;
  QuantMatrices gate = RandomWeights(c.experts, n, c.n_embd, ti, rng);
  QuantMatrices up = RandomWeights(c.experts, n, c.n_embd, ti, rng);
  QuantMatrices sgate = RandomWeights(1, n, c.n_embd, ti, rng);
  QuantMatrices sup = RandomWeights(1, n, c.n_embd, ti, rng);
  Q8Activations x(c.tokens, c.n_embd, ti.pair_order, rng);
  // Activation scales cut so that gate and up land in SiLU's curved range and around the clamps
  // (|g|, |u| of a few units) instead of far past both: the 4-6 bit types' random blocks give dots
  // ~20x larger than the 2-3 bit types' (whose grids and scales are smaller).
  const float x_scale = ti.block_bytes >= 136 ? 0.05f : 1.0f;
  for (float2& d : x.xd) d = make_float2(d.x * x_scale, d.y * x_scale);
  std::vector<int32_t> ids(c.tokens * c.routed);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % c.experts);
  if (c.bad_ids) {
    ids[0] = -3;
    ids[ids.size() - 1] = c.experts;
  }
  const float shared_limit = c.limit > 0.0f ? 0.0f : 6.0f;
  // The reference act rows.
  std::vector<double> want(slots * n), tol(slots * n);
  double g_abs = 0;  // the mean |g|, printed: the range the case exercises
  for (int t = 0; t < c.tokens; ++t) {
    const int8_t* xl = x.xl.data() + t * c.n_embd;
    const float2* xd = x.xd.data() + t * (c.n_embd / 32);
    for (int j = 0; j < per_token; ++j) {
      QuantMatrices *gm = &gate, *um = &up;
      int e = 0;
      float limit = c.limit;
      if (j == c.routed) {
        gm = &sgate, um = &sup, limit = shared_limit;
      } else {
        e = ids[t * c.routed + j];
      }
      for (int64_t o = 0; o < n; ++o) {
        const int64_t i = (int64_t{t} * per_token + j) * n + o;
        if (j != c.routed && (e < 0 || e >= c.experts)) {
          want[i] = 0.0, tol[i] = 0.0;  // SwiGLU(0, 0)
          continue;
        }
        const RowDot g = DotRow(ti, gm->block(e, o, 0), nb, xl, xd);
        g_abs += std::fabs(g.acc) / double(slots * n);
        const SwiGluRef r = SwiGluD(g, DotRow(ti, um->block(e, o, 0), nb, xl, xd), limit);
        want[i] = r.value, tol[i] = r.tol;
      }
    }
  }
  // Outputs poisoned, with guards past the slots' rows.
  constexpr int kGuard = 64;
  const float fnan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> act(slots * n + kGuard);
  std::vector<uint4> act_q_store((slots * n + kGuard + 15) / 16);
  int8_t* act_q = reinterpret_cast<int8_t*>(act_q_store.data());
  std::vector<float2> act_d(slots * blocks + kGuard);
  std::vector<int32_t> counters(slots * blocks + kGuard, 0);

  gi::ExpertGateUpParams a{};
  SetIndexedParams(gate, c.n_embd, n, c.experts, ids.data(), ti.pair_order, x, 0, &a.p);
  SetGridTables(&a.p);
  a.up = up.data();
  a.up_row_bytes = up.row_bytes;
  a.up_matrix_bytes = up.matrix_bytes;
  a.limit = c.limit;
  a.clamp = c.limit > 0.0f;
  a.routed = c.routed;
  a.tokens = c.tokens;
  if (c.shared) {
    a.shared_gate = sgate.data();
    a.shared_up = sup.data();
    a.shared_gate_row_bytes = sgate.row_bytes;
    a.shared_up_row_bytes = sup.row_bytes;
    a.shared_limit = shared_limit;
    a.shared_clamp = shared_limit > 0.0f;
  }
  a.act = act.data();
  a.act_q = act_q;
  a.act_d = act_d.data();
  a.act_pair_order = c.pair_order_out;
  a.counters = counters.data();
  emu::ClearGlobals();
  for (QuantMatrices* m : {&gate, &up, &sgate, &sup})
    emu::AddGlobal(m->segments(), m->segment_bytes());
  emu::AddGlobal(x.xq(), c.tokens * c.n_embd);
  emu::AddGlobal(x.xd.data(), x.xd.size() * sizeof(float2));
  emu::AddGlobal(ids.data(), ids.size() * 4);
  emu::AddGlobal(act.data(), slots * n * 4);  // the quantizing warp reads the block back
  AddGridTableGlobals();
  // One launch, checked.
  auto run = [&]() {
    std::fill(act.begin(), act.end(), fnan);
    std::memset(act_q, 0x5A, act_q_store.size() * 16);
    std::fill(act_d.begin(), act_d.end(), make_float2(fnan, fnan));
    const cudaError_t err = gi::LaunchExpertGateUp(c.type, a, nullptr);
    const std::string& label = c.name;
    if (err != cudaSuccess) {
      std::printf("FAIL %s: launcher returned %d\n", label.c_str(), int(err));
      return false;
    }
    // act against the reference.
    int64_t bad = 0, missing = 0;
    double max_rel = 0;  // the largest error as a fraction of its bound
    for (int64_t i = 0; i < slots * n; ++i) {
      if (std::isnan(act[i])) {
        ++missing;
        continue;
      }
      const double e = std::fabs(double(act[i]) - want[i]);
      bad += !(e <= tol[i]) && !(tol[i] == 0.0 && act[i] == 0.0f);
      if (tol[i] > 0.0) max_rel = std::fmax(max_rel, e / tol[i]);
    }
    // The int8 form of the kernel's own act values, block by block.
    int64_t q_bad = 0;
    for (int64_t r = 0; r < slots; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        const float* v = act.data() + r * n + 32 * b;
        float amax = 0.0f;
        for (int k = 0; k < 32; ++k) amax = std::fmax(amax, std::fabs(v[k]));
        const float d = amax / 127.0f;
        int sum = 0;
        for (int k = 0; k < 32; ++k) {
          const int q = d > 0.0f ? static_cast<int>(std::nearbyint(v[k] / d)) : 0;
          sum += q;
          const int pos = c.pair_order_out ? PairPos(k) : k;
          q_bad += act_q[r * n + 32 * b + pos] != static_cast<int8_t>(q);
        }
        const float2 got = act_d[r * blocks + b];
        q_bad += got.x != d || got.y != d * static_cast<float>(sum);
      }
    }
    int64_t stray = 0, counters_left = 0;
    for (int k = 0; k < kGuard; ++k) {
      stray += !std::isnan(act[slots * n + k]) || act_q[slots * n + k] != 0x5A ||
               !std::isnan(act_d[slots * blocks + k].x);
    }
    for (int32_t v : counters) counters_left += v != 0;
    const bool ok = bad == 0 && missing == 0 && q_bad == 0 && stray == 0 && counters_left == 0;
    std::printf(
        "%-4s %-58s grid %u x %u | mean |g| %.2f act err/bound %.2f bad %lld missing %lld | int8 "
        "bad %lld | stray %lld counters left %lld\n",
        ok ? "ok" : "FAIL", label.c_str(), emu::last_grid_x, emu::last_grid_y, g_abs, max_rel,
        (long long)bad, (long long)missing, (long long)q_bad, (long long)stray,
        (long long)counters_left);
    return ok;
  };
  return run();
}

int main(int argc, char** argv) {
  const auto [seed, only] = SetUpEmulation(argc, argv);
  emu::check_global_loads = true;
  gi::g_weights_before_wait = true;  // the shared rows' L2 prefetch (a no-op here) on
  using T = GgmlType;
  const std::vector<GateUpCase> cases = {
      {"IQ4_XS 1024 -> 96, 1 token, shared, pair out", T::kIQ4_XS, 1024, 96, 1, 8, 10, true, false,
       true, 7.0f},
      {"IQ4_XS 512 -> 64, 2 tokens, bad ids", T::kIQ4_XS, 512, 64, 2, 4, 6, true, true, true, 0.0f},
      // 24 and 18 blocks: three ring iterations of two steps (the pointer form's advance).
      {"IQ4_XS 6144 -> 32, 1 token, shared (24 blocks)", T::kIQ4_XS, 6144, 32, 1, 4, 5, true, false,
       true, 7.0f},
      {"IQ3_S 4608 -> 32, 2 tokens (18 blocks)", T::kIQ3_S, 4608, 32, 2, 2, 3, false, false, false,
       0.0f},
      // Session 44's whole iterations (STEPSERVE_MOE_GATE_UP_WHOLE) at two tokens: 20 blocks,
      // one iteration with refills, then a guarded one (and one the same at 16: the last).
      {"IQ4_XS 5120 -> 32, 2 tokens, shared (20 blocks)", T::kIQ4_XS, 5120, 32, 2, 3, 5, true,
       false, true, 7.0f},
      {"IQ4_XS 4096 -> 32, 2 tokens, bad ids (16 blocks)", T::kIQ4_XS, 4096, 32, 2, 2, 4, false,
       true, true, 0.0f},
      {"IQ4_XS 512 -> 64, 3 tokens, shared once", T::kIQ4_XS, 512, 64, 3, 3, 5, true, false, true,
       7.0f},
      {"IQ4_XS 512 -> 32, 4 tokens, shared once, bad ids", T::kIQ4_XS, 512, 32, 4, 2, 4, true, true,
       false, 0.0f},
      {"IQ4_XS 512 -> 64, 3 tokens, no shared", T::kIQ4_XS, 512, 64, 3, 3, 5, false, false, true,
       7.0f},
      {"Q4_K 2304 -> 64, 1 token, shared (9 blocks)", T::kQ4_K, 2304, 64, 1, 4, 6, true, false,
       false, 7.0f},
      {"Q5_K 512 -> 32, 2 tokens", T::kQ5_K, 512, 32, 2, 3, 4, true, false, false, 0.0f},
      {"Q6_K 512 -> 64, 4 tokens, shared once", T::kQ6_K, 512, 64, 4, 2, 3, true, false, false,
       7.0f},
      {"IQ3_S 1024 -> 64, 1 token, shared, pair out", T::kIQ3_S, 1024, 64, 1, 8, 9, true, true,
       true, 7.0f},
      {"IQ3_XXS 512 -> 32, 2 tokens", T::kIQ3_XXS, 512, 32, 2, 4, 5, true, false, false, 0.0f},
      {"IQ2_XXS 512 -> 32, 3 tokens, shared once", T::kIQ2_XXS, 512, 32, 3, 3, 4, true, false,
       false, 0.0f},
      {"IQ2_XS 512 -> 32, 1 token", T::kIQ2_XS, 512, 32, 1, 4, 5, false, false, true, 7.0f},
      {"IQ2_S 512 -> 32, 2 tokens", T::kIQ2_S, 512, 32, 2, 2, 3, true, false, false, 7.0f},
      {"Q2_K 1024 -> 32, 1 token, shared", T::kQ2_K, 1024, 32, 1, 8, 9, true, false, false, 0.0f},
      {"Q3_K 512 -> 32, 4 tokens, shared once", T::kQ3_K, 512, 32, 4, 2, 3, true, false, true,
       7.0f},
  };
  const int fails = RunCases(cases, only, seed, "moe_gate_up ", 0, RunCase);
  return fails != 0;
}
