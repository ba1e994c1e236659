// Runs the real grouped int8-activation GEMV source (kernels/matmul/gemv_q8x_grouped_cuda.cu,
// through its launcher LaunchGemvQ8xGrouped) under the host emulator for IQ4_XS (the row-looping
// form with the register cap and the exact-rows dispatch: 1-4 groups per chunk, more in several
// chunks), Q4_K, Q5_K, Q6_K and the 2-3 bit types of gemv_q8x_pieces_low_bit.cuh (the guarded
// rows form), long rows (8, 16 and 40 blocks: NR = 2 rows per warp) and short ones (5 blocks: a row
// per lane group), unused and out-of-range slots (long and short rows), groups in no slot,
// x_group_div 1 and 8; the long-row cases also as a gate / up pair (GemvParams::w2: a second set
// of matrices in the same launch). y is checked against a double-precision reference: the engine's
// CPU dequantization times the int8 activations; every padding float and the rows of groups in no
// slot must stay untouched.
//   test_gemv_grouped [copy_at_issue 0|1] [seed] [only_case]
// STEPSERVE_GROUPED_ROW_CTAS is set to 2 unless already set, so warps loop over several row blocks.
#include <algorithm>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "emu_cuda.h"
#include "kernels/matmul/gemv_q8x_grouped_cuda.cu"
#include "test_common.h"
#include "test_quant_types.h"

using stepserve::GgmlType;
using stepserve::kernels::gemv_internal::GemvParams;
using stepserve::kernels::gemv_internal::GroupedTakesMatrixPair;
using stepserve::kernels::gemv_internal::kSlotUnused;

using Case = GroupedCase;

GgmlType g_type = GgmlType::kIQ4_XS;  // the weight type of the cases being run
// With a second set of matrices in the same launch (GemvParams::w2, the MoE gate / up pair):
// their rows are written one row past the first set's (y2_row_offset = groups + 1; the row
// between must stay untouched). Run for the long-row cases of the types that carry the pair.
bool g_pair = false;

bool RunCase(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const EmuQuantType ti = EmuType(g_type);
  QuantMatrices wm = RandomWeights(c.experts, c.out, c.in, ti, rng);
  const Grouping grouping = MakeGrouping(c.slots, c.extra_groups, rng);
  const int G = grouping.groups;
  const int64_t x_rows = (G + c.div - 1) / c.div, blocks32 = c.in / 32;
  Q8Activations x(x_rows, c.in, ti.pair_order, rng);
  QuantMatrices wm2 =
      RandomWeights(g_pair ? c.experts : 1, g_pair ? c.out : 1, g_pair ? c.in : 256, ti, rng);
  const int64_t y_stride = c.out + c.y_pad, kGuard = 4096, y2_rows = G + 1;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> want((g_pair ? y2_rows + G : G) * y_stride + kGuard, nan),
      scale(want.size(), 0.0);
  for (int half = 0; half < (g_pair ? 2 : 1); ++half) {
    QuantMatrices& w = half == 0 ? wm : wm2;
    const int64_t row0 = half == 0 ? 0 : y2_rows;
    for (size_t s = 0; s < c.slots.size(); ++s) {
      const int32_t id = grouping.slot_matrix[s];
      if (id == kSlotUnused) continue;
      for (int k = grouping.slot_begin[s]; k < grouping.slot_begin[s + 1]; ++k) {
        const int g = grouping.group_order[k];
        const int64_t r = g / c.div, at = (row0 + g) * y_stride;
        for (int64_t o = 0; o < c.out; ++o) {
          if (id < 0) {
            want[at + o] = 0.0;  // out-of-range ids write zeros
            continue;
          }
          const RowDot dot =
              DotRow(ti, w.block(id, o, 0), w.nb, &x.xl[r * c.in], &x.xd[r * blocks32]);
          want[at + o] = dot.acc;
          scale[at + o] = dot.abs_acc;
        }
      }
    }
  }
  std::vector<float> y(want.size(), std::numeric_limits<float>::quiet_NaN());
  GemvParams p{};
  SetGroupedParams(wm, c.in, c.out, c.experts, c.div, grouping, y.data(), y_stride, &p);
  if (g_pair) {
    p.w2 = wm2.data();
    p.y2_row_offset = y2_rows;
    p.w2_first_slot = static_cast<int>(c.slots.size());
  }
  p.x_pair_order = ti.pair_order;
  SetGridTables(&p);
  p.xq = x.xq();
  p.xd = x.xd.data();
  p.rows = 1;
  emu::ClearGlobals();
  emu::AddGlobal(wm.segments(), wm.segment_bytes());
  if (g_pair) emu::AddGlobal(wm2.segments(), wm2.segment_bytes());
  emu::AddGlobal(x.xq(), x_rows * c.in);
  emu::AddGlobal(x.xd.data(), x.xd.size() * sizeof(float2));
  AddGridTableGlobals();
  emu::AddGlobal(grouping.slot_matrix.data(), grouping.slot_matrix.size() * sizeof(int32_t));
  emu::AddGlobal(grouping.slot_begin.data(), grouping.slot_begin.size() * sizeof(int32_t));
  emu::AddGlobal(grouping.group_order.data(), grouping.group_order.size() * sizeof(int32_t));
  const long long ctas0 = emu::n_ctas;
  const cudaError_t err = stepserve::kernels::gemv_internal::LaunchGemvQ8xGrouped(
      g_type, p, static_cast<int64_t>(c.slots.size()), /*overlap_previous=*/false, nullptr);
  if (err != cudaSuccess) {
    std::printf("FAIL %s: launcher returned %d\n", c.name.c_str(), int(err));
    return false;
  }
  const YCheck check = CheckY(y, want, scale);
  const bool ok = check.ok() && emu::last_grid_y == unsigned(c.slots.size() * (g_pair ? 2 : 1)) &&
                  emu::last_block == 128;
  std::printf(
      "%-4s %-40s grid %ux%u ctas %lld | checked %lld zero-rows %lld max rel %.2e | bad %lld "
      "stray %lld missing %lld\n",
      ok ? "ok" : "FAIL", (std::string(ti.name) + (g_pair ? " pair " : " ") + c.name).c_str(),
      emu::last_grid_x, emu::last_grid_y, emu::n_ctas - ctas0, (long long)check.checked,
      (long long)check.zeros, check.max_rel, (long long)check.bad, (long long)check.stray,
      (long long)check.missing);
  return ok;
}

int main(int argc, char** argv) {
  setenv("STEPSERVE_GROUPED_ROW_CTAS", "2", /*overwrite=*/0);
  const auto [seed, only] = SetUpEmulation(argc, argv);
  emu::check_global_loads = true;
  const int unused = kSlotUnused;
  const std::vector<Case> cases = {
      {"long rows, 1-4 groups per slot", 4096, 40, 1, 3, 6, {{2, 1}, {0, 2}, {5, 3}, {1, 4}}, 2},
      {"long rows, 5 and 9 groups (two, three chunks)", 2048, 33, 1, 0, 3, {{1, 5}, {2, 9}}, 1},
      // 150 output rows: the last row block partial.
      {"long rows, 150 rows, 2 and 9 groups", 2048, 150, 1, 2, 3, {{1, 2}, {0, 9}}, 1},
      // 40 blocks: five iterations of the two-step ring (the pointer form's advance matters from
      // the third; 16 blocks are two).
      {"long rows of 40 blocks, 1-3 groups", 10240, 20, 1, 1, 3, {{1, 2}, {0, 1}, {2, 3}}, 1},
      {"long rows, unused and out-of-range slots",
       2048,
       24,
       1,
       5,
       4,
       {{3, 2}, {-1, 3}, {0, 1}, {unused, 0}},
       0},
      {"short rows (5 blocks), 1-5 groups",
       1280,
       70,
       1,
       2,
       5,
       {{4, 1}, {1, 2}, {0, 3}, {2, 4}, {3, 5}},
       3},
      // 3 blocks: shorter than the whole-row ring (STEPSERVE_GROUPED_WHOLE keeps these on
      // the guarded kernel).
      {"short rows (3 blocks), 1-4 groups", 768, 44, 1, 1, 4, {{1, 1}, {0, 2}, {3, 4}, {2, 3}}, 2},
      {"short rows, unused and out-of-range slots",
       1280,
       40,
       1,
       3,
       4,
       {{2, 2}, {-1, 3}, {0, 5}, {unused, 0}},
       1},
      {"short rows, x_group_div 8 (token = group / 8)",
       1280,
       36,
       8,
       1,
       4,
       {{0, 3}, {3, 6}, {1, 1}},
       6},
  };
  int fails = 0;
  for (GgmlType t : {GgmlType::kIQ4_XS, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K,
                     GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S, GgmlType::kIQ3_XXS,
                     GgmlType::kIQ3_S, GgmlType::kQ2_K, GgmlType::kQ3_K}) {
    g_type = t;
    g_pair = false;
    const std::string label = std::string("gemv_grouped ") + EmuType(t).name + " ";
    fails = RunCases(cases, only, seed, label.c_str(), fails, RunCase);
    // The gate / up pair: the long-row cases of the types whose kernels carry it; elsewhere the
    // launcher must refuse it.
    std::vector<Case> long_cases;
    for (const Case& c : cases) {
      if (GroupedTakesMatrixPair(t, c.in)) long_cases.push_back(c);
    }
    const bool carries = t == GgmlType::kIQ4_XS || t == GgmlType::kQ4_K || t == GgmlType::kQ5_K ||
                         t == GgmlType::kQ6_K;
    if (carries != !long_cases.empty()) {
      std::printf("FAIL %s: GroupedTakesMatrixPair gave %zu long-row cases\n", EmuType(t).name,
                  long_cases.size());
      ++fails;
    }
    g_pair = true;
    const std::string pair_label = label + "pair ";
    fails = RunCases(long_cases, only, seed, pair_label.c_str(), fails, RunCase);
    g_pair = false;
  }
  return fails != 0;
}
