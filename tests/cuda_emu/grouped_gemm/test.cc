// Runs the real GemmMmaIq4XsGroupedKernel source (through its launcher LaunchGemmQ8xMmaGrouped)
// under the host emulator and checks y against a double-precision reference built from the same
// IQ4_XS weights and (pair-ordered) int8 activations.
//   test [copy_at_issue 0|1] [seed] [only_case]
#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "emu_cuda.h"
#include "kernels/matmul/gemm_grouped_mma_cuda.cu"
#include "test_common.h"

using stepserve::GgmlType;
using stepserve::kernels::gemv_internal::GemvParams;
using stepserve::kernels::gemv_internal::kSlotUnused;

using Case = GroupedCase;

static int g_permute_x = 1;  // 0: harness mutation, activations stored un-permuted

bool RunCase(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  QuantMatrices wm(c.experts, c.out, c.in, 136, rng);
  const int64_t nb = wm.nb, row_bytes = wm.row_bytes, matrix_bytes = wm.matrix_bytes;
  uint8_t* w = wm.data();
  std::uniform_real_distribution<float> ud(0.5f, 2.0f);
  wm.SetScales(c.experts, c.out,
               [&] { return ud(rng) * 1e-3f * ((rng() & 1) ? 1.f : -1.f); });  // the rest random
  // ---- groups and slots ----
  const Grouping grouping = MakeGrouping(c.slots, c.extra_groups, rng);
  const int G = grouping.groups;
  const std::vector<int32_t>& group_order = grouping.group_order;
  const std::vector<int32_t>& slot_matrix = grouping.slot_matrix;
  const std::vector<int32_t>& slot_begin = grouping.slot_begin;
  // ---- activations ----
  const int64_t x_rows = (G + c.div - 1) / c.div, blocks32 = c.in / 32;
  Q8Activations x(x_rows, c.in, g_permute_x != 0, rng);
  const std::vector<int8_t>& xl = x.xl;
  int8_t* xq = x.xq();
  const std::vector<float2>& xd = x.xd;
  // ---- reference (double) ----
  const int64_t y_stride = c.out + c.y_pad;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> want(G * y_stride, nan), scale(G * y_stride, 0.0);
  std::vector<float> want32(G * y_stride, 0.f);  // F32 model in the kernel's order, no FMA
  for (size_t s = 0; s < c.slots.size(); ++s) {
    const int32_t id = slot_matrix[s];
    if (id == kSlotUnused) continue;
    for (int k = slot_begin[s]; k < slot_begin[s + 1]; ++k) {
      const int g = group_order[k];
      const int64_t r = g / c.div;
      for (int64_t o = 0; o < c.out; ++o) {
        if (id < 0) {
          want[g * y_stride + o] = 0.0;
          continue;
        }
        const Iq4XsDot dot = DotIq4XsRow(w + id * matrix_bytes + o * row_bytes, nb, &xl[r * c.in],
                                         &xd[r * blocks32]);
        const double acc = dot.acc, abs_acc = dot.abs_acc;
        const float acc32 = dot.acc32;
        want[g * y_stride + o] = acc;
        scale[g * y_stride + o] = abs_acc;
        want32[g * y_stride + o] = acc32;
      }
    }
  }
  // ---- kernel ----
  const int64_t kGuard = 4096;  // NaN floats after the last row: writes past y show as stray
  std::vector<float> y(G * y_stride + kGuard, std::numeric_limits<float>::quiet_NaN());
  want.resize(y.size(), nan);
  scale.resize(y.size(), 0.0);
  GemvParams p{};
  SetGroupedParams(wm, c.in, c.out, c.experts, c.div, grouping, y.data(), y_stride, &p);
  p.xq = xq;
  p.xd = xd.data();
  p.rows = static_cast<int>(x_rows);
  emu::ClearGlobals();
  emu::AddGlobal(w, c.experts * matrix_bytes);
  emu::AddGlobal(xq, x_rows * c.in);
  emu::AddGlobal(xd.data(), xd.size() * sizeof(float2));
  const long long mma0 = emu::n_mma, ctas0 = emu::n_ctas, bpm0 = g_byte_perm_msb;
  const cudaError_t err = stepserve::kernels::gemv_internal::LaunchGemmQ8xMmaGrouped(
      GgmlType::kIQ4_XS, p, static_cast<int64_t>(c.slots.size()), nullptr);
  if (err != cudaSuccess) {
    std::printf("FAIL %s: launcher returned %d\n", c.name.c_str(), int(err));
    return false;
  }
  // ---- compare ----
  double max_rel = 0, max_abs_norm = 0;
  int64_t not_bitexact = 0, cancel_only = 0, bad = 0, written_ok = 0, zeros = 0, stray = 0,
          missing = 0;
  for (int64_t i = 0; i < int64_t(y.size()); ++i) {
    const double ref = want[i];
    const float got = y[i];
    if (std::isnan(ref)) {
      if (!std::isnan(got)) ++stray;
      continue;
    }
    if (std::isnan(got)) {
      ++missing;
      continue;
    }
    if (scale[i] == 0) {  // a -1 slot's zero row
      if (got != 0.0f)
        ++bad;
      else
        ++zeros;
      continue;
    }
    const double err_abs = std::fabs(double(got) - ref);
    const double rel = err_abs / std::max(std::fabs(ref), 1e-300);
    const double norm = err_abs / scale[i];
    max_rel = std::max(max_rel, rel);
    max_abs_norm = std::max(max_abs_norm, norm);
    // 1e-4 relative; for a sum that cancels to below 1e-3 of its terms, 1e-6 of the terms' sum.
    if (!(rel <= 1e-4 || norm <= 1e-6))
      ++bad;
    else
      ++written_ok;
    cancel_only += rel > 1e-4 && norm <= 1e-6;
    not_bitexact += got != want32[i];
  }
  const bool ok = bad == 0 && stray == 0 && missing == 0 && err == cudaSuccess &&
                  emu::last_grid_x == unsigned((c.out + 63) / 64) &&
                  emu::last_grid_y == c.slots.size() && emu::last_block == 128;
  std::printf(
      "%-4s %-44s grid %ux%u smem %zu ctas %lld mma %lld | checked %lld zero-rows %lld | "
      "max rel %.2e max err/sum|terms| %.2e (rel>1e-4: %lld) not-bit-exact-vs-F32-model %lld | bad "
      "%lld stray %lld missing %lld%s\n",
      ok ? "ok" : "FAIL", c.name.c_str(), emu::last_grid_x, emu::last_grid_y, emu::last_smem,
      emu::n_ctas - ctas0, emu::n_mma - mma0, (long long)written_ok, (long long)zeros, max_rel,
      max_abs_norm, (long long)cancel_only, (long long)not_bitexact, (long long)bad,
      (long long)stray, (long long)missing,
      g_byte_perm_msb != bpm0 ? " (byte_perm msb used!)" : "");
  return ok;
}

int main(int argc, char** argv) {
  const auto [seed, only] = SetUpEmulation(argc, argv);
  g_permute_x = argc > 4 ? std::atoi(argv[4]) : 1;
  stepserve::kernels::gemv_internal::GroupedGemmSetting().store(2);
  const int E = 5;
  const std::vector<SlotSpec> slots = {{1, 1},  {E - 1, 31}, {0, 32}, {kSlotUnused, 3}, {2, 33},
                                       {-1, 5}, {3, 70},     {4, 0},  {-1, 1}};
  std::vector<Case> cases = {
      {"in 768 out 128 div 1", 768, 128, 1, 3, E, slots, 6},
      {"in 768 out 80 div 4", 768, 80, 4, 5, E, slots, 7},
      {"in 1024 out 80 div 1", 1024, 80, 1, 0, E, slots, 5},
      {"in 1024 out 128 div 4", 1024, 128, 4, 2, E, slots, 4},
      // extra edges: one block (a lone half pair), one full pair, out < 64, 5 pairs + half
      {"in 256 out 80 div 1", 256, 80, 1, 1, E, slots, 2},
      {"in 512 out 16 div 4", 512, 16, 4, 1, E, slots, 3},
      {"in 2816 out 80 div 1 (11 blocks)", 2816, 80, 1, 1, E, slots, 2},
  };
  const int fails = RunCases(cases, only, seed, "", 0, RunCase);
  return fails != 0;
}
