// Runs the real tensor-core GEMV source (kernels/matmul/gemv_mma_cuda.cu, through its launcher
// LaunchGemvQ8xMma) under the host emulator: the plain kernels for 2-16 activation rows and the
// wide one for 17-32 (STEPSERVE_GEMV_MMA_WIDE's GemvMmaIq4XsWideKernel, 4 tiles), y checked
// against a double-precision reference of the same IQ4_XS weights and pair-ordered int8
// activations, every y row's padding and the rows past the last checked untouched.
//   test_gemv_mma [copy_at_issue 0|1] [seed] [only_case]
#include <algorithm>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "emu_cuda.h"
#include "kernels/matmul/gemv_mma_cuda.cu"
#include "test_common.h"

using stepserve::GgmlType;
using stepserve::kernels::gemv_internal::GemvParams;

struct Case {
  int64_t in, out;
  int rows;
  int64_t y_pad;  // y_stride = out + y_pad
};

bool RunCase(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  QuantMatrices wm(1, c.out, c.in, 136, rng);
  std::uniform_real_distribution<float> ud(0.5f, 2.0f);
  wm.SetScales(1, c.out, [&] { return ud(rng) * 1e-3f * ((rng() & 1) ? 1.f : -1.f); });
  Q8Activations x(c.rows, c.in, /*pair_order=*/true, rng);
  const int64_t y_stride = c.out + c.y_pad, blocks32 = c.in / 32;
  const int64_t kGuard = 4096;  // NaN floats after the last row: writes past y show as stray
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> want(c.rows * y_stride + kGuard, nan), scale(want.size(), 0.0);
  for (int r = 0; r < c.rows; ++r)
    for (int64_t o = 0; o < c.out; ++o) {
      const Iq4XsDot dot =
          DotIq4XsRow(wm.data() + o * wm.row_bytes, wm.nb, &x.xl[r * c.in], &x.xd[r * blocks32]);
      want[r * y_stride + o] = dot.acc;
      scale[r * y_stride + o] = dot.abs_acc;
    }
  std::vector<float> y(want.size(), std::numeric_limits<float>::quiet_NaN());
  GemvParams p{};
  SetPlainParams(wm, c.in, c.out, c.rows, /*pair_order=*/true, x, y.data(), y_stride, &p);
  const long long mma0 = emu::n_mma, ctas0 = emu::n_ctas;
  const cudaError_t err = stepserve::kernels::gemv_internal::LaunchGemvQ8xMma(
      GgmlType::kIQ4_XS, p, /*overlap_previous=*/false, nullptr);
  const std::string name = "in " + std::to_string(c.in) + " out " + std::to_string(c.out) +
                           " rows " + std::to_string(c.rows);
  if (err != cudaSuccess) {
    std::printf("FAIL %s: launcher returned %d\n", name.c_str(), int(err));
    return false;
  }
  const YCheck check = CheckY(y, want, scale);
  const bool wide = c.rows > 16;
  const unsigned block = wide ? 128u : (c.out < 8192 ? 256u : 128u);
  const bool ok =
      check.ok() && emu::last_grid_x == unsigned((c.out + 15) / 16) && emu::last_block == block;
  std::printf(
      "%-4s %-30s grid %ux%u block %u smem %zu ctas %lld mma %lld | checked %lld max rel "
      "%.2e | bad %lld stray %lld missing %lld\n",
      ok ? "ok" : "FAIL", name.c_str(), emu::last_grid_x, emu::last_grid_y, emu::last_block,
      emu::last_smem, emu::n_ctas - ctas0, emu::n_mma - mma0, (long long)check.checked,
      check.max_rel, (long long)check.bad, (long long)check.stray, (long long)check.missing);
  return ok;
}

int main(int argc, char** argv) {
  const auto [seed, only] = SetUpEmulation(argc, argv);
  stepserve::kernels::gemv_internal::GemvMmaWideMaxRowsSetting().store(
      stepserve::kernels::gemv_internal::kGemvMmaWideMaxRows);
  const std::vector<Case> cases = {
      {768, 37, 2, 3},    // plain, 8 warps, one tile of 8 rows
      {256, 16, 9, 1},    // plain, two tiles, one block (a lone half pair)
      {2816, 33, 16, 2},  // plain, 11 blocks
      {768, 37, 17, 3},   // wide, 4 tiles (17 rows used)
      {256, 16, 32, 0},   // wide, exactly 4 tiles
      {1280, 40, 25, 5},  // wide, 4 tiles (25 rows used)
      {2816, 20, 31, 1},  // 11 blocks, 4 tiles
      {5120, 16, 30, 1},  // 10 pairs: warps 0-1 refill their ring
  };
  const int fails = RunCases(cases, only, seed, "gemv_mma ", 0, RunCase);
  return fails != 0;
}
