// Runs the real SwiGluRowsF16Kernel (kernels/matmul/moe_swiglu_f16.cuh, through
// LaunchSwiGluRowsF16) and, as its reference, the two steps it replaces: the SwiGLU in float
// (ExpertSwiGlu, the function SwiGluRowsKernel applies) and the real ConvertActivationsF16Kernel
// (LaunchConvertActivationsF16) on those rows, both under the host emulator. The kernel must give
// the converter's halves bit for bit, in pair order (the IQ4_XS down projection) and natural order
// (the K-quants'), with and without the clamp, for values that saturate F16 (+-65504), that round
// to F16 subnormals and that sit on ties; every half past the rows must stay poisoned.
// Usage: emu_test_swiglu_f16 MODE SEED (MODE: cp.async landing, unused here; kept for run.sh).
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "emu_cuda.h"
#include "kernels/matmul/gemm_grouped_f16_cuda.cu"
#include "kernels/matmul/moe_decode_cuda.h"
#include "test_common.h"

namespace stepserve::kernels {
namespace swiglu_emu {
#include "kernels/matmul/moe_swiglu_f16.cuh"
}  // namespace swiglu_emu
}  // namespace stepserve::kernels

namespace {

using stepserve::kernels::gemv_internal::GemvParams;

struct Case {
  std::string name;
  int64_t rows, n_ff;
  bool pair_order, clamp;
  float limit;
};

// Gate and up values (the same class at an index): mostly a few units (SiLU's curve, the clamp),
// some large (unclamped, the product saturates F16), some tiny (products in F16's subnormals),
// some with 12 significant bits.
float RandomValue(std::mt19937& rng, int64_t i) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  switch (i % 13) {
    case 5:
      return normal(rng) * 3e3f;
    case 9:
      return normal(rng) * 1e-4f;
    case 11:
      return std::ldexp(float(2 * (rng() % 1024) + 2049), -12);
    default:
      return normal(rng);
  }
}

bool RunCase(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t n = c.rows * c.n_ff;
  std::vector<float> g(n), u(n);
  for (int64_t i = 0; i < n; ++i) g[i] = RandomValue(rng, i), u[i] = RandomValue(rng, i);
  // Reference: the float SwiGLU rows, then the converter.
  std::vector<float> z(n);
  for (int64_t i = 0; i < n; ++i)
    z[i] = stepserve::kernels::gemv_internal::ExpertSwiGlu(g[i], u[i], c.limit, c.clamp);
  const int64_t guard = 64;
  std::vector<uint16_t> want(n + guard, 0xFFFF), got(n + guard, 0xFFFF);
  GemvParams q{};
  q.in = c.n_ff;
  q.out = 1;
  q.x = z.data();
  q.x_stride = c.n_ff;
  q.rows = static_cast<int>(c.rows);
  q.x_pair_order = c.pair_order;
  emu::ClearGlobals();
  const cudaError_t conv_err =
      stepserve::kernels::gemv_internal::LaunchConvertActivationsF16(q, want.data(), nullptr);
  emu::ClearGlobals();
  const cudaError_t err = stepserve::kernels::swiglu_emu::LaunchSwiGluRowsF16(
      g.data(), u.data(), c.rows, c.n_ff, c.limit, c.clamp, c.pair_order,
      reinterpret_cast<__half*>(got.data()), nullptr);
  int64_t bad = 0, first = -1, stray = 0, saturated = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (got[i] != want[i] && bad++ == 0) first = i;
    saturated += (want[i] & 0x7FFF) == 0x7BFF;
  }
  for (int64_t i = n; i < n + guard; ++i) stray += got[i] != 0xFFFF;
  const bool ok = conv_err == cudaSuccess && err == cudaSuccess && bad == 0 && stray == 0 &&
                  emu::last_block == 256 && emu::last_grid_x == unsigned((n / 8 + 255) / 256);
  std::printf("%s %-44s halves %lld saturated %lld mismatches %lld stray %lld",
              ok ? "ok  " : "FAIL", c.name.c_str(), static_cast<long long>(n),
              static_cast<long long>(saturated), static_cast<long long>(bad),
              static_cast<long long>(stray));
  if (first >= 0) {
    std::printf(" (first at %lld: 0x%04x, want 0x%04x)", static_cast<long long>(first), got[first],
                want[first]);
  }
  std::printf("\n");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const auto [seed, only] = SetUpEmulation(argc, argv);
  const std::vector<Case> cases = {
      {"pair order, clamp 7, 37 rows x 1280", 37, 1280, true, true, 7.0f},
      {"natural order, clamp 7, 37 rows x 1280", 37, 1280, false, true, 7.0f},
      {"pair order, no clamp, 5 rows x 96", 5, 96, true, false, 0.0f},
      {"natural order, no clamp, 1 row x 32", 1, 32, false, false, 0.0f},
      {"pair order, clamp 3, 300 rows x 64", 300, 64, true, true, 3.0f},
  };
  int fails = 0, i = 0;
  for (const Case& c : cases) {
    if (only >= 0 && i != only) {
      ++i;
      continue;
    }
    fails += !RunCase(c, seed * 100 + i++);
  }
  std::printf("%s: %d of %zu cases failed (seed %u)\n", fails ? "FAIL" : "PASS", fails,
              cases.size(), seed);
  return fails ? 1 : 0;
}
