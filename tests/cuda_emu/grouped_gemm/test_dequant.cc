// Runs the device dequantization kernels of kernels/matmul/dequant_cuda.cu under the host
// emulator: DequantStagedKernel (each CTA's blocks staged in shared memory;
// STEPSERVE_DEQUANT_STAGED) and DequantIq4XsF16Kernel must give the generic DequantRowsKernel's
// output bit for bit - the generic kernel is checked against the CPU dequantizer on the device
// (tests/gpu/dequant_cuda_test). Every quantized type; F16 and F32 output; rows that end mid-chunk
// (2048 values per staged CTA), a row range from an offset and gathered ids with an out-of-range
// id; outputs poisoned first, padding past `cols` must stay poisoned. Block bytes are random (any
// scale bits, NaN included: the kernels must agree on those too). Usage: emu_test_dequant MODE SEED
// (MODE: cp.async landing, unused here; kept for run.sh).
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "emu_cuda.h"
#include "engine/quant/quant_tables.h"
#include "kernels/matmul/dequant_cuda.cu"
#include "test_common.h"

// The launchers' error query: the emulated launches fail loudly (emu::Fail) instead.
extern "C" cudaError_t cudaGetLastError(void) { return cudaSuccess; }

namespace stepserve::kernels {
// The host tables stand in for the device copies (dequant_tables_cuda.cu).
KernelStatus DeviceDequantTables(DequantTables* t) {
  t->iq2xxs_grid = quant::kIq2xxsGrid;
  t->iq2xs_grid = quant::kIq2xsGrid;
  t->iq2s_grid = quant::kIq2sGrid;
  t->iq3xxs_grid = quant::kIq3xxsGrid;
  t->iq3s_grid = quant::kIq3sGrid;
  t->ksigns = quant::kKsignsIq2xs;
  t->iq4nl_values = quant::kKvaluesIq4nl;
  return KernelStatus::kOk;
}
}  // namespace stepserve::kernels

namespace {

using stepserve::GgmlType;
namespace k = stepserve::kernels;

struct Case {
  GgmlType type;
  int64_t cols, table_rows, first_row, rows, out_stride;
  bool gather, f16;
};

template <GgmlType kType>
bool RunTyped(const Case& c, uint32_t seed) {
  constexpr auto kGeo = k::dequant_device::Geometry(kType);
  std::mt19937 rng(seed);
  const int64_t row_bytes = c.cols / kGeo.elems * kGeo.bytes;
  std::vector<uint8_t> w(static_cast<size_t>(row_bytes * c.table_rows + 16));
  for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
  std::vector<int32_t> ids(static_cast<size_t>(c.rows));
  for (int64_t r = 0; r < c.rows; ++r) {
    ids[r] =
        static_cast<int32_t>(r == 2 ? c.table_rows : (c.table_rows - 1 - 3 * r % c.table_rows));
  }
  const size_t elem = c.f16 ? 2 : 4;
  const size_t n = static_cast<size_t>(c.rows * c.out_stride) * elem;
  std::vector<uint8_t> want(n + 64, 0xFF), staged(n + 64, 0xFF), fast(n + 64, 0xFF);
  k::DequantTables tables;
  k::DeviceDequantTables(&tables);
  k::DequantRowsParams p{};
  p.w = w.data();
  p.w_row_bytes = row_bytes;
  p.cols = c.cols;
  p.table_rows = c.table_rows;
  p.first_row = c.first_row;
  p.row_ids = c.gather ? ids.data() : nullptr;
  p.rows = c.rows;
  p.f16_out = c.f16;
  p.vector_store = (c.out_stride * elem) % 16 == 0;
  p.out_stride = c.out_stride;
  const int64_t groups = c.rows * (c.cols / 8);
  p.out = want.data();
  k::LaunchWithPdl(k::DequantRowsKernel<kType>, static_cast<int>((groups + 255) / 256), 256, 0,
                   nullptr, p, tables);
  p.out = staged.data();
  const int64_t chunks = c.rows * ((c.cols + k::kStagedValues - 1) / k::kStagedValues);
  // A grid shorter than the chunks: CTAs loop (the kernel's grid stride).
  k::LaunchWithPdl(k::DequantStagedKernel<kType>,
                   static_cast<int>(chunks > 3 ? chunks - 2 : chunks), 256, 0, nullptr, p, tables);
  int64_t bad_staged = 0, bad_fast = 0;
  for (size_t i = 0; i < n + 64; ++i) bad_staged += staged[i] != want[i];
  bool fast_run = false;
  if constexpr (kType == GgmlType::kIQ4_XS) {
    if (c.f16 && p.vector_store) {
      p.out = fast.data();
      k::LaunchWithPdl(k::DequantIq4XsF16Kernel, static_cast<int>((groups + 255) / 256), 256, 0,
                       nullptr, p, tables.iq4nl_values);
      for (size_t i = 0; i < n + 64; ++i) bad_fast += fast[i] != want[i];
      fast_run = true;
    }
  }
  int64_t poisoned_pad = 0;  // padding bytes of `want` still 0xFF (the generic kernel's share)
  for (int64_t r = 0; r < c.rows; ++r) {
    for (size_t b = static_cast<size_t>(c.cols) * elem;
         b < static_cast<size_t>(c.out_stride) * elem; ++b) {
      poisoned_pad += want[static_cast<size_t>(r * c.out_stride) * elem + b] == 0xFF;
    }
  }
  const bool pad_ok = poisoned_pad == c.rows * (c.out_stride - c.cols) * static_cast<int64_t>(elem);
  const bool ok = bad_staged == 0 && bad_fast == 0 && pad_ok;
  std::printf("%s %-8s cols %5lld rows %3lld stride %5lld %s %s: staged mismatches %lld%s\n",
              ok ? "ok  " : "FAIL", std::string(stepserve::TypeInfo(c.type).name).c_str(),
              static_cast<long long>(c.cols), static_cast<long long>(c.rows),
              static_cast<long long>(c.out_stride), c.gather ? "gathered" : "range   ",
              c.f16 ? "f16" : "f32", static_cast<long long>(bad_staged),
              fast_run ? (" iq4_xs kernel mismatches " + std::to_string(bad_fast)).c_str() : "");
  return ok;
}

bool Run(const Case& c, uint32_t seed) {
  switch (c.type) {
    case GgmlType::kQ8_0:
      return RunTyped<GgmlType::kQ8_0>(c, seed);
    case GgmlType::kIQ4_NL:
      return RunTyped<GgmlType::kIQ4_NL>(c, seed);
    case GgmlType::kQ2_K:
      return RunTyped<GgmlType::kQ2_K>(c, seed);
    case GgmlType::kQ3_K:
      return RunTyped<GgmlType::kQ3_K>(c, seed);
    case GgmlType::kQ4_K:
      return RunTyped<GgmlType::kQ4_K>(c, seed);
    case GgmlType::kQ5_K:
      return RunTyped<GgmlType::kQ5_K>(c, seed);
    case GgmlType::kQ6_K:
      return RunTyped<GgmlType::kQ6_K>(c, seed);
    case GgmlType::kIQ2_XXS:
      return RunTyped<GgmlType::kIQ2_XXS>(c, seed);
    case GgmlType::kIQ2_XS:
      return RunTyped<GgmlType::kIQ2_XS>(c, seed);
    case GgmlType::kIQ2_S:
      return RunTyped<GgmlType::kIQ2_S>(c, seed);
    case GgmlType::kIQ3_XXS:
      return RunTyped<GgmlType::kIQ3_XXS>(c, seed);
    case GgmlType::kIQ3_S:
      return RunTyped<GgmlType::kIQ3_S>(c, seed);
    case GgmlType::kIQ4_XS:
      return RunTyped<GgmlType::kIQ4_XS>(c, seed);
    default:
      return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const auto [seed, only] = SetUpEmulation(argc, argv);
  const std::vector<Case> cases = {
      {GgmlType::kIQ4_XS, 4096, 9, 2, 5, 4096, false, true},
      {GgmlType::kIQ4_XS, 2304, 9, 0, 7, 2312, true, true},
      {GgmlType::kIQ4_XS, 1280, 9, 1, 4, 1284, false, true},
      {GgmlType::kIQ4_XS, 1280, 9, 1, 4, 1280, true, false},
      {GgmlType::kQ4_K, 4352, 9, 3, 5, 4360, false, true},
      {GgmlType::kQ5_K, 2304, 9, 0, 6, 2304, true, false},
      {GgmlType::kQ6_K, 2304, 9, 1, 5, 2310, false, true},
      {GgmlType::kQ6_K, 256, 9, 0, 9, 256, true, true},
      {GgmlType::kQ8_0, 4128, 9, 2, 5, 4128, false, true},
      {GgmlType::kIQ4_NL, 2080, 9, 0, 6, 2088, true, true},
      {GgmlType::kQ2_K, 2304, 9, 3, 5, 2304, false, false},
      {GgmlType::kQ3_K, 4096, 9, 0, 4, 4096, true, true},
      {GgmlType::kIQ2_XXS, 2304, 9, 2, 5, 2312, false, true},
      {GgmlType::kIQ2_XS, 768, 9, 0, 7, 768, true, true},
      {GgmlType::kIQ2_S, 512, 9, 1, 6, 512, false, true},
      {GgmlType::kIQ3_XXS, 2560, 9, 0, 5, 2560, false, false},
      {GgmlType::kIQ3_S, 1280, 9, 4, 5, 1280, true, true},
  };
  int fails = 0, i = 0;
  for (const Case& c : cases) {
    if (only >= 0 && i != only) {
      ++i;
      continue;
    }
    fails += !Run(c, seed * 100 + i++);
  }
  std::printf("%s: %d of %zu cases failed (seed %u)\n", fails ? "FAIL" : "PASS", fails,
              cases.size(), seed);
  return fails ? 1 : 0;
}
