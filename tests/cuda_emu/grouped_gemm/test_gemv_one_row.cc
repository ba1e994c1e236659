// Runs the real one-activation-row GEMVs (kernels/matmul/gemv_q8x_cuda.cu, through its launcher
// LaunchGemvQ8x with p.rows = 1) and its 2-4-row kernels under the host emulator: the lean IQ4_XS
// kernel (one row per warp, and with STEPSERVE_GEMV_ROW_CTAS small, warps looping over rows) and
// GemvQ8Kernel for Q4_K, Q5_K, Q6_K and the 2-3 bit types of gemv_q8x_pieces_low_bit.cuh, Q2_K and
// Q3_K included (long rows; 5-block rows take the short-row mapping). Session 18 moved the first
// weight loads of these kernels before the PDL wait (STEPSERVE_WEIGHTS_BEFORE_WAIT bits 1 and 8);
// run.sh runs this test with and without them, so a ring loaded for the wrong row shows here. y is
// checked against a double-precision reference - the engine's own dequantization of the weights
// times the int8 activations - and every padding float must stay untouched.
//   test_gemv_one_row [copy_at_issue 0|1] [seed] [only_case]
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "emu_cuda.h"
#include "kernels/matmul/gemv_q8x_cuda.cu"
#include "test_common.h"
#include "test_quant_types.h"

namespace stepserve::kernels::gemv_internal {
// Host stand-ins for the launchers in other files that LaunchGemvQ8x tries first: the streamed
// GEMV (as with STEPSERVE_GEMV_STREAM=0) and the tensor-core GEMV (from 8 rows; never at one).
cudaError_t LaunchGemvQ8xStream(GgmlType, const GemvParams&, int64_t, bool, cudaStream_t) {
  return cudaErrorNotSupported;
}
cudaError_t LaunchGemvQ8xMma(GgmlType, const GemvParams&, bool, cudaStream_t) {
  return cudaErrorNotSupported;
}
int GemvMmaMinRows() { return 8; }
}  // namespace stepserve::kernels::gemv_internal

using stepserve::GgmlType;
using stepserve::kernels::gemv_internal::GemvParams;

struct OneRowCase {
  std::string name;
  GgmlType type;
  int64_t in, out, y_pad;
  int rows = 1;  // activation rows (2-4: the few-row kernels)
};

bool RunCase(const OneRowCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const EmuQuantType ti = EmuType(c.type);
  QuantMatrices wm = RandomWeights(1, c.out, c.in, ti, rng);
  Q8Activations x(c.rows, c.in, ti.pair_order, rng);
  const int64_t nb = c.in / 256, kGuard = 64, y_stride = c.out + c.y_pad;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> want(c.rows * y_stride + kGuard, nan), abs_sum(want.size(), 0.0);
  for (int r = 0; r < c.rows; ++r) {
    for (int64_t o = 0; o < c.out; ++o) {
      const RowDot dot =
          DotRow(ti, wm.block(0, o, 0), nb, x.xl.data() + r * c.in, x.xd.data() + r * (c.in / 32));
      want[r * y_stride + o] = dot.acc;
      abs_sum[r * y_stride + o] = dot.abs_acc;
    }
  }
  std::vector<float> y(want.size(), std::numeric_limits<float>::quiet_NaN());
  GemvParams p{};
  SetPlainParams(wm, c.in, c.out, c.rows, ti.pair_order, x, y.data(), y_stride, &p);
  SetGridTables(&p);
  AddGridTableGlobals();
  const long long ctas0 = emu::n_ctas;
  const cudaError_t err = stepserve::kernels::gemv_internal::LaunchGemvQ8x(
      c.type, p, /*overlap_previous=*/false, nullptr);
  if (err != cudaSuccess) {
    std::printf("FAIL %s: launcher returned %d\n", c.name.c_str(), int(err));
    return false;
  }
  const YCheck check = CheckY(y, want, abs_sum);
  std::printf(
      "%-4s %-44s grid %u ctas %lld | checked %lld max rel %.2e | bad %lld stray %lld missing "
      "%lld\n",
      check.ok() ? "ok" : "FAIL", c.name.c_str(), emu::last_grid_x, emu::n_ctas - ctas0,
      (long long)check.checked, check.max_rel, (long long)check.bad, (long long)check.stray,
      (long long)check.missing);
  return check.ok();
}

int main(int argc, char** argv) {
  const auto [seed, only] = SetUpEmulation(argc, argv);
  emu::check_global_loads = true;
  const std::vector<OneRowCase> cases = {
      {"IQ4_XS 4096 x 37", GgmlType::kIQ4_XS, 4096, 37, 3},
      {"IQ4_XS 1024 x 70 (4 blocks)", GgmlType::kIQ4_XS, 1024, 70, 0},
      // Session 44's whole iterations (STEPSERVE_GEMV_ONE_ROW_WHOLE): 48 blocks (two with
      // refills, then the last), 44 (one with refills, then guarded), 36 (the same, another tail).
      {"IQ4_XS 12288 x 9", GgmlType::kIQ4_XS, 12288, 9, 1},
      {"IQ4_XS 11264 x 7", GgmlType::kIQ4_XS, 11264, 7, 2},
      {"IQ4_XS 9216 x 5", GgmlType::kIQ4_XS, 9216, 5, 0},
      {"Q4_K 4096 x 21", GgmlType::kQ4_K, 4096, 21, 2},
      {"Q4_K 2048 x 9", GgmlType::kQ4_K, 2048, 9, 0},
      {"Q5_K 4096 x 13", GgmlType::kQ5_K, 4096, 13, 1},
      {"Q6_K 4096 x 11", GgmlType::kQ6_K, 4096, 11, 4},
      {"Q6_K 1280 x 9 (short rows)", GgmlType::kQ6_K, 1280, 9, 0},
      {"Q4_K 1280 x 10 (short rows)", GgmlType::kQ4_K, 1280, 10, 1},
      {"IQ2_XXS 4096 x 19", GgmlType::kIQ2_XXS, 4096, 19, 2},
      {"IQ2_XXS 1280 x 11 (short rows)", GgmlType::kIQ2_XXS, 1280, 11, 1},
      {"IQ2_XS 4096 x 15", GgmlType::kIQ2_XS, 4096, 15, 1},
      {"IQ2_XS 1280 x 9 (short rows)", GgmlType::kIQ2_XS, 1280, 9, 2},
      {"IQ2_S 2816 x 13 (11 blocks)", GgmlType::kIQ2_S, 2816, 13, 1},
      {"IQ2_S 1280 x 10 (short rows)", GgmlType::kIQ2_S, 1280, 10, 0},
      {"IQ3_XXS 4096 x 17", GgmlType::kIQ3_XXS, 4096, 17, 3},
      {"IQ3_XXS 1536 x 9 (short rows)", GgmlType::kIQ3_XXS, 1536, 9, 0},
      {"IQ3_S 4096 x 15", GgmlType::kIQ3_S, 4096, 15, 1},
      {"IQ3_S 2816 x 10 (11 blocks)", GgmlType::kIQ3_S, 2816, 10, 2},
      {"IQ3_S 1280 x 7 (short rows)", GgmlType::kIQ3_S, 1280, 7, 0},
      {"Q2_K 4096 x 13", GgmlType::kQ2_K, 4096, 13, 1},
      {"Q2_K 1280 x 9 (short rows)", GgmlType::kQ2_K, 1280, 9, 2},
      {"Q3_K 4096 x 11", GgmlType::kQ3_K, 4096, 11, 3},
      {"Q3_K 1280 x 10 (short rows)", GgmlType::kQ3_K, 1280, 10, 0},
      {"Q2_K 4096 x 21", GgmlType::kQ2_K, 4096, 21, 3},
      {"Q2_K 1280 x 9 (short rows)", GgmlType::kQ2_K, 1280, 9, 1},
      {"Q3_K 4096 x 13", GgmlType::kQ3_K, 4096, 13, 2},
      {"Q3_K 2304 x 9 (9 blocks)", GgmlType::kQ3_K, 2304, 9, 0},
      {"Q3_K 1280 x 10 (short rows)", GgmlType::kQ3_K, 1280, 10, 1},
      // 2-4 activation rows: long rows two output rows per warp (IQ4_XS: the exact-rows kernels),
      // short ones a row per lane group; odd counts of output rows (a warp's last row past out).
      {"IQ4_XS 4096 x 37, 2 rows", GgmlType::kIQ4_XS, 4096, 37, 3, 2},
      {"IQ4_XS 2304 x 13, 3 rows (9 blocks)", GgmlType::kIQ4_XS, 2304, 13, 1, 3},
      {"IQ4_XS 4096 x 11, 4 rows", GgmlType::kIQ4_XS, 4096, 11, 2, 4},
      {"IQ4_XS 1280 x 9, 4 rows (short rows)", GgmlType::kIQ4_XS, 1280, 9, 1, 4},
      {"Q4_K 4096 x 13, 3 rows", GgmlType::kQ4_K, 4096, 13, 1, 3},
      {"Q4_K 2048 x 7, 4 rows", GgmlType::kQ4_K, 2048, 7, 2, 4},
      {"Q5_K 4096 x 9, 2 rows", GgmlType::kQ5_K, 4096, 9, 0, 2},
      {"Q6_K 4096 x 11, 4 rows", GgmlType::kQ6_K, 4096, 11, 3, 4},
      {"Q6_K 2304 x 5, 3 rows (9 blocks)", GgmlType::kQ6_K, 2304, 5, 1, 3},
  };
  const char* mask = std::getenv("STEPSERVE_WEIGHTS_BEFORE_WAIT");
  const char* ctas = std::getenv("STEPSERVE_GEMV_ROW_CTAS");
  const std::string label = std::string("gemv_one_row weights-before-wait ") +
                            (mask ? mask : "default") + " row-ctas " + (ctas ? ctas : "default") +
                            " ";
  const int fails = RunCases(cases, only, seed, label.c_str(), 0, RunCase);
  return fails != 0;
}
