// Runs the real GemmF16GroupedKernel source (through its launcher LaunchGemmF16Grouped), with its
// IQ4_XS, Q4_K and Q6_K decoders (gemm_f16_decoders.cuh), and ConvertActivationsF16Kernel
// (LaunchConvertActivationsF16) under the host emulator. The converter's F16 activations (pair
// order for IQ4_XS, natural for Q4_K, Q6_K) are compared bit for bit with a host conversion; the
// GEMM's y with two double references: (1) the kernel's own F16 weights (table value times the
// F16-rounded sub-block scale, rounded to F16 once) times the F16 activations, within 1e-5 of the
// row's sum of |products| (only the F32 accumulation differs); (2) the unrounded dequantized
// weights times the (clamped) F32 activations, within the F16 roundings' bound (2e-3 relative
// plus the subnormal steps), to show the F16 rounding is what it should be. Q6_K's unrounded
// weights are the repository's CPU dequantizer's (DequantQ6_K, engine/quant/quant_k.cc, linked
// in), which the test's own decode must match bit for bit.
//   test_f16 [copy_at_issue 0|1] [seed] [only_case]
#include <algorithm>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "emu_cuda.h"
#include "engine/quant/quant_internal.h"
#include "f16_low_bit_models.h"
#include "kernels/matmul/gemm_grouped_f16_cuda.cu"
#include "test_common.h"
#include "test_quant_types.h"

using stepserve::F16ToF32;
using stepserve::F32ToF16;
using stepserve::GgmlType;
using stepserve::kernels::gemv_internal::GemvParams;
using stepserve::kernels::gemv_internal::kSlotUnused;

constexpr double kSub = 0x1p-25;  // half the F16 subnormal step: the rounding error near zero

// ConvertActivationsF16Kernel's value: saturated at +-65504 (an infinity would turn zero weights
// into NaNs), then rounded to nearest even.
static float Clamp16(float v) { return std::min(std::max(v, -65504.f), 65504.f); }

// The emulator's F16 arithmetic (emu::F16Round) and the references' (float16.h F32ToF16 /
// F16ToF32) are independent implementations of round-to-nearest-even with subnormals: they must
// agree on every F16, on every tie between neighbours and on random floats.
static bool CheckF16Rounding() {
  int64_t bad = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00u) == 0x7C00u && (h & 0x3FFu)) continue;  // NaN
    const float f = F16ToF32(uint16_t(h));
    bad += F32ToF16(f) != h || emu::F16Round(f) != h;
    if ((h & 0x7FFFu) >= 0x7C00u) continue;
    // The tie with the next F16 up in magnitude: exact in float (12 significant bits).
    const double mid = (double(f) + double(F16ToF32(uint16_t(h + 1)))) / 2;
    const uint16_t even = (h & 1) ? uint16_t(h + 1) : uint16_t(h);
    bad += F32ToF16(float(mid)) != even || emu::F16Round(mid) != even;
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 1 << 21; ++i) {
    const uint32_t bits = (rng() & 0x80000000u) | (0x30000000u + rng() % 0x18000000u);
    float f;
    std::memcpy(&f, &bits, 4);
    bad += F32ToF16(f) != emu::F16Round(f);
  }
  if (bad) std::printf("FAIL F16 rounding self-check: %lld disagreements\n", (long long)bad);
  return bad == 0;
}

struct Case {
  std::string name;
  int64_t in, out;
  int div;
  int64_t y_pad;  // y_stride = out + y_pad
  int64_t x_pad;  // F32 activations' x_stride = in + x_pad (a multiple of 4: float4 loads)
  int experts;
  std::vector<SlotSpec> slots;
  int extra_groups;                   // groups in no slot (their y rows must stay NaN)
  GgmlType type = GgmlType::kIQ4_XS;  // or kQ4_K, kQ6_K (natural-order activations)
  // Q6_K: rows padded to this (2: unpadded 210-byte blocks, block shifts vary per row) and the
  // matrices' first byte this far past a 16-byte boundary (< 16).
  int64_t row_align = 16, offset = 0;
};

// A random F32 activation; row 0 also gets the converter's edge values (saturation, ties,
// subnormals, -0), kept out of the other rows so their sums are not dominated by them.
static float RandomActivation(std::mt19937& rng, int64_t row, float row_scale) {
  static const float kEdges[] = {
      1e6f,  -1e6f,  65504.f,  -65519.f, 65520.f, 1 + 0x1p-11f, 3 * 0x1p-11f + 1,
      1e-7f, -3e-8f, 0x1p-25f, -0.0f,    6.1e-5f};
  if (row == 0 && rng() % 8 == 0) return kEdges[rng() % std::size(kEdges)];
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  return u(rng) * row_scale;
}

// Weight j of sub-block ib of an IQ4_XS block: the kernel's F16 value (table value times the
// F16-rounded d * (ls - 32), rounded to F16 once), the unrounded value, its magnitude, the table
// value.
static void DecodeIq4Xs(const uint8_t* blk, int ib, int j, float* w16, double* wp, double* wmag,
                        int8_t* wq) {
  uint16_t dh, sh;
  std::memcpy(&dh, blk, 2);
  std::memcpy(&sh, blk + 2, 2);
  const int ls = ((blk[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
  // d * (ls - 32) and table value * scale are exact in float: one F16 rounding each.
  const float s16 = F16ToF32(F32ToF16(F16ToF32(dh) * float(ls - 32)));
  const uint8_t q = blk[8 + 16 * ib + (j % 16)];
  const int8_t v = kValues[j < 16 ? (q & 15) : (q >> 4)];
  *w16 = F16ToF32(F32ToF16(float(v) * s16));
  *wp = double(F16ToF32(dh)) * (ls - 32) * v;
  *wmag = std::fabs(*wp);
  *wq = v;
}

// Weight q of sub-block ib of a Q4_K / Q5_K block (d, dmin, scales[12], ...; ggml's
// get_scale_min_k4 for the 6-bit scale and min): the kernel's value is q * s16 - m16 rounded to
// F16 once (an F16 fma), with s16 and m16 the F16-rounded d * sc and dmin * m. The fma's exact
// value is rounded with the emulator's F16Round (checked against float16.h's rounding by
// CheckF16Rounding).
static void DecodeScaleMinK(const uint8_t* blk, int ib, int q, float* w16, double* wp, double* wmag,
                            int8_t* wq) {
  uint16_t dh, mh;
  std::memcpy(&dh, blk, 2);
  std::memcpy(&mh, blk + 2, 2);
  const uint8_t* sc = blk + 4;
  int scale, min;
  if (ib < 4) {
    scale = sc[ib] & 63;
    min = sc[ib + 4] & 63;
  } else {
    scale = (sc[ib + 4] & 0xF) | ((sc[ib - 4] >> 6) << 4);
    min = (sc[ib + 4] >> 4) | ((sc[ib] >> 6) << 4);
  }
  const float s16 = F16ToF32(F32ToF16(F16ToF32(dh) * float(scale)));
  const float m16 = F16ToF32(F32ToF16(F16ToF32(mh) * float(min)));
  *w16 = F16ToF32(emu::F16Round(double(q) * s16 - double(m16)));
  const double ds = double(F16ToF32(dh)) * scale * q, dm = double(F16ToF32(mh)) * min;
  *wp = ds - dm;
  *wmag = std::fabs(ds) + std::fabs(dm);
  *wq = int8_t(q);
}

// Q4_K: element j of sub-block ib is nibble ib % 2 of qs[32 (ib / 2) + j] (qs at byte 16).
static void DecodeQ4K(const uint8_t* blk, int ib, int j, float* w16, double* wp, double* wmag,
                      int8_t* wq) {
  const int q = (blk[16 + 32 * (ib / 2) + j] >> (4 * (ib % 2))) & 15;
  DecodeScaleMinK(blk, ib, q, w16, wp, wmag, wq);
}

// Q5_K (d, dmin, scales[12], qh[32], qs[128]): Q4_K's nibble with qs at byte 48, and bit 4 from
// bit ib of qh[j].
static void DecodeQ5K(const uint8_t* blk, int ib, int j, float* w16, double* wp, double* wmag,
                      int8_t* wq) {
  const int q =
      ((blk[48 + 32 * (ib / 2) + j] >> (4 * (ib % 2))) & 15) | (((blk[16 + j] >> ib) & 1) << 4);
  DecodeScaleMinK(blk, ib, q, w16, wp, wmag, wq);
}

// The same for Q6_K (ql[128], qh[64], scales[16] int8, d): element 32 ib + j, ib = 4h + qd, has
// q = (nibble qd / 2 of ql[64h + 32(qd % 2) + j]) | (bits 2qd.. of qh[32h + j]) << 4 and scale
// scales[8h + 2qd + j / 16]; the kernel's value is (q - 32) times the F16-rounded d * sc, rounded
// to F16 once. *wp: f32(f32(d * sc) * (q - 32)), as DequantQ6_K (compared by the caller).
static void DecodeQ6K(const uint8_t* blk, int ib, int j, float* w16, double* wp, double* wmag,
                      int8_t* wq) {
  uint16_t dh;
  std::memcpy(&dh, blk + 208, 2);
  const int h = ib / 4, qd = ib % 4;
  const int lo = (blk[64 * h + 32 * (qd % 2) + j] >> (4 * (qd / 2))) & 15;
  const int hi = (blk[128 + 32 * h + j] >> (2 * qd)) & 3;
  const int q = (lo | hi << 4) - 32;
  const int sc = int8_t(blk[192 + 8 * h + 2 * qd + j / 16]);
  const float ds = F16ToF32(dh) * float(sc);  // exact (11 x 8 significant bits)
  const float s16 = F16ToF32(F32ToF16(ds));
  *w16 = F16ToF32(emu::F16Round(double(q) * s16));
  *wp = double(ds * float(q));
  *wmag = std::fabs(*wp);
  *wq = int8_t(q);
}

// Q6_K blocks with the extremes forced in some of them: every q 0 or every q 63 (ql, qh all 0x00
// or 0xFF), scales -128 and 127 alternating.
static void ForceQ6KExtremes(QuantMatrices& wm, int experts, int64_t out) {
  int64_t k = 0;
  for (int e = 0; e < experts; ++e)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t b = 0; b < wm.nb; ++b, ++k) {
        uint8_t* blk = wm.block(e, o, b);
        if (k % 13 == 5 || k % 13 == 9) std::memset(blk, k % 13 == 5 ? 0x00 : 0xFF, 192);
        if (k % 5 == 2) {
          for (int i = 0; i < 16; ++i) blk[192 + i] = i % 2 ? 0x7F : 0x80;
        }
      }
}

bool RunCase(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const bool q4k = c.type == GgmlType::kQ4_K, q6k = c.type == GgmlType::kQ6_K;
  const bool q5k = c.type == GgmlType::kQ5_K;
  const bool q2k = c.type == GgmlType::kQ2_K;
  const bool value_times_scale =
      c.type == GgmlType::kIQ2_XXS || c.type == GgmlType::kIQ2_XS || c.type == GgmlType::kIQ2_S ||
      c.type == GgmlType::kIQ3_XXS || c.type == GgmlType::kIQ3_S ||
      c.type == GgmlType::kQ3_K;  // (and Q3_K: value times a float scale too)
  const bool pair_order = c.type == GgmlType::kIQ4_XS;
  // Under STEPSERVE_GEMM_F16_WGMMA=1 IQ4_XS takes the warpgroup-MMA kernel
  // (gemm_grouped_wgmma_cuda.cu), whose activations are the pair order's 32-bit words of each
  // 32-value block transposed 4 x 4: pair position 8t + h at 8 (h / 2) + 2t + h % 2.
  GemvParams order_params{};
  order_params.in = c.in;
  order_params.x_pair_order = pair_order;
  const bool wgmma = stepserve::kernels::gemv_internal::GemmF16WgmmaOrder(order_params);
  const int64_t block_bytes = q4k                                                         ? 144
                              : q5k                                                       ? 176
                              : q6k                                                       ? 210
                              : q2k                                                       ? 84
                              : c.type == GgmlType::kIQ2_XXS                              ? 66
                              : c.type == GgmlType::kIQ2_XS                               ? 74
                              : c.type == GgmlType::kIQ2_S                                ? 82
                              : c.type == GgmlType::kIQ3_XXS                              ? 98
                              : (c.type == GgmlType::kIQ3_S || c.type == GgmlType::kQ3_K) ? 110
                                                                                          : 136;
  QuantMatrices wm(c.experts, c.out, c.in, block_bytes, rng, c.row_align, c.offset);
  const int64_t nb = wm.nb;
  uint8_t* w = wm.data();
  std::uniform_real_distribution<float> ud(0.25f, 4.0f);
  // Mostly ordinary scales; 1 in 16 tiny (F16 subnormal sub-block scales), 1 in 64 zero (the
  // other header bytes and the qs stay random). Q4_K's dmin likewise.
  auto next_scale = [&] {
    const int kind = int(rng() % 64);
    const float mag = kind == 0 ? 0.f : (kind < 4 ? ud(rng) * 1e-6f : ud(rng) * 1e-3f);
    return (rng() & 1) ? mag : -mag;
  };
  if (q6k) {
    ForceQ6KExtremes(wm, c.experts, c.out);
    wm.SetScales(c.experts, c.out, next_scale, 208);
  } else if (q2k) {
    wm.SetScales(c.experts, c.out, next_scale, 80);
    wm.SetScales(c.experts, c.out, next_scale, 82);
  } else if (c.type == GgmlType::kQ3_K) {
    wm.SetScales(c.experts, c.out, next_scale, 108);
  } else {
    wm.SetScales(c.experts, c.out, next_scale);
  }
  if (q4k || q5k) wm.SetScales(c.experts, c.out, next_scale, 2);
  // The kernel's F16 weights (reference 1) and the plain dequantized ones (reference 2), per
  // expert, row and logical k; wmag: the magnitude the F16 roundings are relative to (IQ4_XS:
  // |weight|; Q4_K: |d sc q| + |dmin m|, as the min may cancel the scaled value); wq: the integer.
  std::vector<float> w16(c.experts * c.out * c.in);
  std::vector<double> wp(w16.size()), wmag(w16.size());
  std::vector<int8_t> wq(w16.size());
  // Q6_K: the CPU dequantizer's weights, and how often the extremes occur (each must).
  int64_t cpu_bad = 0, n_q0 = 0, n_q63 = 0, n_sc_min = 0, n_sc_max = 0, n_shift[8] = {};
  float cpu[256];
  for (int e = 0; e < c.experts; ++e)
    for (int64_t o = 0; o < c.out; ++o)
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = wm.block(e, o, b);
        namespace qi = stepserve::quant::internal;
        if (q2k) qi::DequantQ2_K(blk, cpu, 1);
        if (c.type == GgmlType::kIQ2_XXS) qi::DequantIQ2_XXS(blk, cpu, 1);
        if (c.type == GgmlType::kIQ2_XS) qi::DequantIQ2_XS(blk, cpu, 1);
        if (c.type == GgmlType::kIQ2_S) qi::DequantIQ2_S(blk, cpu, 1);
        if (c.type == GgmlType::kIQ3_XXS) qi::DequantIQ3_XXS(blk, cpu, 1);
        if (c.type == GgmlType::kIQ3_S) qi::DequantIQ3_S(blk, cpu, 1);
        if (c.type == GgmlType::kQ3_K) qi::DequantQ3_K(blk, cpu, 1);
        if (value_times_scale || q2k) ++n_shift[(reinterpret_cast<uintptr_t>(blk) & 15) / 2];
        if (q6k) {
          stepserve::quant::internal::DequantQ6_K(blk, cpu, 1);
          ++n_shift[(reinterpret_cast<uintptr_t>(blk) & 15) / 2];
          for (int i = 0; i < 16; ++i) {
            n_sc_min += blk[192 + i] == 0x80;
            n_sc_max += blk[192 + i] == 0x7F;
          }
        }
        for (int ib = 0; ib < 8; ++ib) {
          for (int j = 0; j < 32; ++j) {
            const int64_t at = (e * c.out + o) * c.in + 256 * b + 32 * ib + j;
            if (value_times_scale || q2k) {
              if (q2k) {
                DecodeQ2K(blk, ib, j, &w16[at], &wmag[at], &wq[at]);
              } else if (c.type == GgmlType::kQ3_K) {
                DecodeQ3K(blk, ib, j, &w16[at], &wmag[at], &wq[at]);
              } else {
                DecodeGrid(c.type, blk, ib, j, &w16[at], &wmag[at], &wq[at]);
              }
              wp[at] = cpu[32 * ib + j];
              // The model's value times its float scale must be the CPU's weight (Q2_K: within
              // its own two roundings, checked through the bound of reference 2 instead).
              if (value_times_scale) cpu_bad += std::fabs(double(cpu[32 * ib + j])) != wmag[at];
            } else if (q4k) {
              DecodeQ4K(blk, ib, j, &w16[at], &wp[at], &wmag[at], &wq[at]);
            } else if (q5k) {
              DecodeQ5K(blk, ib, j, &w16[at], &wp[at], &wmag[at], &wq[at]);
              namespace qi = stepserve::quant::internal;
              if (ib == 0 && j == 0) qi::DequantQ5_K(blk, cpu, 1);
              // The unrounded F32 weight must be the CPU dequantizer's (up to its float math).
              cpu_bad += std::fabs(wp[at] - cpu[32 * ib + j]) > 1e-6 * (wmag[at] + 1e-30);
            } else if (q6k) {
              DecodeQ6K(blk, ib, j, &w16[at], &wp[at], &wmag[at], &wq[at]);
              cpu_bad += float(wp[at]) != cpu[32 * ib + j];
              n_q0 += wq[at] == -32;
              n_q63 += wq[at] == 31;
            } else {
              DecodeIq4Xs(blk, ib, j, &w16[at], &wp[at], &wmag[at], &wq[at]);
            }
          }
        }
      }
  bool coverage_ok = true;
  if (value_times_scale || q2k) {
    coverage_ok = cpu_bad == 0;
    std::printf("     %s blocks at shift 0..14: ", c.name.substr(0, c.name.find(' ')).c_str());
    for (int64_t n : n_shift) std::printf("%lld ", (long long)n);
    std::printf("| |value * scale| vs the CPU dequantizer: %lld differ\n", (long long)cpu_bad);
  }
  if (q5k) {
    coverage_ok = cpu_bad == 0;
    std::printf("     Q5_K weights vs DequantQ5_K: %lld differ\n", (long long)cpu_bad);
  }
  if (q6k) {
    coverage_ok = cpu_bad == 0 && n_q0 > 0 && n_q63 > 0 && n_sc_min > 0 && n_sc_max > 0;
    std::printf("     Q6_K blocks at shift 0..14: ");
    for (int64_t n : n_shift) std::printf("%lld ", (long long)n);
    std::printf("| q 0: %lld, 63: %lld | sc -128: %lld, 127: %lld | vs DequantQ6_K: %lld differ\n",
                (long long)n_q0, (long long)n_q63, (long long)n_sc_min, (long long)n_sc_max,
                (long long)cpu_bad);
  }
  // ---- groups and slots ----
  const Grouping grouping = MakeGrouping(c.slots, c.extra_groups, rng);
  const int G = grouping.groups;
  const std::vector<int32_t>& group_order = grouping.group_order;
  const std::vector<int32_t>& slot_matrix = grouping.slot_matrix;
  const std::vector<int32_t>& slot_begin = grouping.slot_begin;
  // ---- activations: F32 rows (x_stride apart), their F16 values, and the pair-ordered F16 ----
  const int64_t x_rows = (G + c.div - 1) / c.div, x_stride = c.in + c.x_pad;
  std::vector<uint4> x_store((x_rows * x_stride * 4 + 15) / 16);
  float* x = reinterpret_cast<float*>(x_store.data());
  std::vector<float> x16(x_rows * c.in);  // logical order
  std::vector<uint4> xh_store((x_rows * c.in * 2 + 15) / 16);
  uint16_t* xh = reinterpret_cast<uint16_t*>(xh_store.data());
  for (int64_t r = 0; r < x_rows; ++r) {
    const float row_scale = std::ldexp(1.f, int(rng() % 9) - 4);
    for (int64_t k = 0; k < x_stride; ++k) {
      const float v = RandomActivation(rng, r, row_scale);
      x[r * x_stride + k] = v;
      if (k >= c.in) continue;
      const uint16_t h = F32ToF16(Clamp16(v));
      x16[r * c.in + k] = F16ToF32(h);
      const int pp = PairPos(int(k % 32));
      const int pos = wgmma ? 8 * (pp % 8 / 2) + 2 * (pp / 8) + pp % 2 : pp;
      xh[r * c.in + (pair_order ? k / 32 * 32 + pos : k)] = h;
    }
  }
  // ---- the converter, against the host conversion (bit for bit) ----
  std::vector<uint4> xk_store(xh_store.size());
  std::memset(xk_store.data(), 0xFF, xk_store.size() * 16);  // NaN: a missed element shows
  uint16_t* xk = reinterpret_cast<uint16_t*>(xk_store.data());
  GemvParams q{};
  q.in = c.in;
  q.out = c.out;
  q.x = x;
  q.x_stride = x_stride;
  q.rows = static_cast<int>(x_rows);
  q.x_pair_order = pair_order;
  emu::ClearGlobals();
  const cudaError_t conv_err =
      stepserve::kernels::gemv_internal::LaunchConvertActivationsF16(q, xk, nullptr);
  int64_t conv_bad = 0;
  for (int64_t i = 0; i < x_rows * c.in; ++i) conv_bad += xk[i] != xh[i];
  const bool conv_ok = conv_err == cudaSuccess && conv_bad == 0 && emu::last_block == 256 &&
                       emu::last_grid_x == unsigned((x_rows * c.in / (wgmma ? 32 : 8) + 255) / 256);
  // ---- references (double) ----
  const int64_t y_stride = c.out + c.y_pad;
  const int64_t kGuard = 4096;  // NaN floats after the last row: writes past y show as stray
  const int64_t ny = G * y_stride + kGuard;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  enum Kind : uint8_t { kUntouched, kZero, kComputed };
  std::vector<uint8_t> kind(ny, kUntouched);
  std::vector<double> want(ny, nan), sum_abs(ny, 0.0), plain(ny, nan), plain_bound(ny, 0.0);
  std::vector<int> slot_of(ny, -1);
  for (size_t s = 0; s < c.slots.size(); ++s) {
    const int32_t id = slot_matrix[s];
    if (id == kSlotUnused) continue;
    for (int k = slot_begin[s]; k < slot_begin[s + 1]; ++k) {
      const int g = group_order[k];
      const int64_t r = g / c.div;
      for (int64_t o = 0; o < c.out; ++o) {
        const int64_t i = g * y_stride + o;
        slot_of[i] = int(s);
        if (id < 0) {
          kind[i] = kZero;
          continue;
        }
        kind[i] = kComputed;
        const int64_t wrow = (id * c.out + o) * c.in;
        double acc = 0, abs_acc = 0, acc_p = 0, bound = 0;
        for (int64_t kk = 0; kk < c.in; ++kk) {
          const double prod = double(w16[wrow + kk]) * x16[r * c.in + kk];  // exact
          acc += prod;
          abs_acc += std::fabs(prod);
          const double xv = Clamp16(x[r * x_stride + kk]), wv = wp[wrow + kk];
          acc_p += wv * xv;
          // Three roundings to F16 (scale, weight, activation; Q4_K: also the min): 2^-11
          // relative each (3 * 4.9e-4 < 2e-3) of the magnitudes they apply to, or below 2^-14
          // half a subnormal step each, scaled by the other factors.
          bound += 2e-3 * wmag[wrow + kk] * std::fabs(xv) +
                   kSub * (std::fabs(xv) * (std::abs(wq[wrow + kk]) + (q4k || q2k ? 2 : 1)) +
                           2 * std::fabs(wv));
        }
        want[i] = acc;
        sum_abs[i] = abs_acc;
        plain[i] = acc_p;
        plain_bound[i] = bound;
      }
    }
  }
  // ---- kernel ----
  std::vector<float> y(ny, std::numeric_limits<float>::quiet_NaN());
  GemvParams p{};
  SetGroupedParams(wm, c.in, c.out, c.experts, c.div, grouping, y.data(), y_stride, &p);
  p.xh = xh;
  p.rows = static_cast<int>(x_rows);
  p.x_pair_order = pair_order;
  SetGridTables(&p);
  emu::ClearGlobals();  // the only buffers cp.async may read (Q6_K: segments past its blocks)
  emu::AddGlobal(wm.segments(), wm.segment_bytes());
  emu::AddGlobal(xh, x_rows * c.in * 2);
  const long long mma0 = emu::n_mma, ctas0 = emu::n_ctas;
  const int64_t slots = static_cast<int64_t>(c.slots.size());
  const bool applies =
      stepserve::kernels::gemv_internal::GroupedGemmF16Applies(c.type, c.in, slots);
  const cudaError_t err =
      stepserve::kernels::gemv_internal::LaunchGemmF16Grouped(c.type, p, slots, nullptr);
  // ---- compare ----
  // Chunks of 128 pairs for IQ4_XS unless STEPSERVE_GEMM_F16_WIDE=0, for Q4_K and Q6_K too at 2;
  // else 64.
  const char* wide_env = std::getenv("STEPSERVE_GEMM_F16_WIDE");
  const char wide_setting = wide_env == nullptr || wide_env[0] == '\0' ? '1' : wide_env[0];
  const bool wide = (wide_setting == '2' && (c.type == GgmlType::kIQ4_XS || q4k || q6k)) ||
                    (wide_setting != '0' && wide_setting != '2' && c.type == GgmlType::kIQ4_XS);
  const int chunk_pairs = wide || wgmma ? 128 : 64;
  double max_norm = 0, max_plain = 0, max_plain_rel = 0;
  int64_t bad = 0, plain_bad = 0, written_ok = 0, zeros = 0, stray = 0, missing = 0;
  for (int64_t i = 0; i < ny; ++i) {
    const float got = y[i];
    bool wrong = false;
    if (kind[i] == kUntouched) {
      stray += !std::isnan(got);
      wrong = !std::isnan(got);
    } else if (std::isnan(got)) {
      ++missing;
      wrong = true;
    } else if (kind[i] == kZero) {
      zeros += got == 0.0f;
      bad += got != 0.0f;
      wrong = got != 0.0f;
    } else {
      const double e = std::fabs(double(got) - want[i]);
      const double norm = e / std::max(sum_abs[i], 1e-300);
      max_norm = std::max(max_norm, sum_abs[i] > 0 ? norm : (e > 0 ? 1.0 : 0.0));
      wrong = !(e <= 1e-5 * sum_abs[i]);  // !(<=): a NaN is wrong too
      bad += wrong;
      written_ok += !wrong;
      const double ep = std::fabs(double(got) - plain[i]);
      max_plain = std::max(max_plain, ep / std::max(plain_bound[i], 1e-300));
      max_plain_rel = std::max(max_plain_rel, ep / std::max(sum_abs[i], 1e-300));
      plain_bad += !(ep <= plain_bound[i]);
    }
    if (wrong && bad + stray + missing <= 3) {  // the first few mismatches, for a report
      const int64_t g = i / y_stride, o = i % y_stride;
      const int s = slot_of[i];
      int pos = -1;
      for (int k = s >= 0 ? slot_begin[s] : 0; s >= 0 && k < slot_begin[s + 1]; ++k)
        if (group_order[k] == g) pos = k - slot_begin[s];
      std::printf(
          "  mismatch %s: y[group %lld][row %lld] (slot %d matrix %d, column %d of the slot, "
          "chunk %d col %d) got %.9g want %.9g (sum|products| %.3g)\n",
          c.name.c_str(), (long long)g, (long long)o, s, s >= 0 ? slot_matrix[s] : -99, pos,
          pos / chunk_pairs, pos % chunk_pairs, got,
          kind[i] == kComputed ? want[i] : (kind[i] == kZero ? 0.0 : nan), sum_abs[i]);
    }
  }
  const bool stride_112 = q2k || c.type == GgmlType::kIQ3_XXS || c.type == GgmlType::kIQ2_XS ||
                          c.type == GgmlType::kIQ2_S;
  const int stride = q4k                            ? 160
                     : q5k                          ? 176
                     : q6k                          ? 224
                     : stride_112                   ? 112
                     : c.type == GgmlType::kIQ2_XXS ? 80
                                                    : 144;  // IQ4_XS, IQ3_S
  // (The wgmma kernel stages 128 pairs x 512 bytes of activations: core matrices, no padding.)
  // STEPSERVE_GEMM_F16_WGMMA=2: 12 warps, 192 weight rows per CTA.
  const char* wgmma_env = std::getenv("STEPSERVE_GEMM_F16_WGMMA");
  const int tile_rows = wgmma && wgmma_env != nullptr && wgmma_env[0] == '2' ? 192 : 128;
  const size_t want_smem =
      2 * (tile_rows * stride + chunk_pairs * (wgmma ? 512 : 576)) + chunk_pairs * sizeof(int);
  const bool ok = coverage_ok && conv_ok && applies && bad == 0 && plain_bad == 0 && stray == 0 &&
                  missing == 0 && err == cudaSuccess &&
                  emu::last_grid_x == unsigned((c.out + tile_rows - 1) / tile_rows) &&
                  emu::last_grid_y == c.slots.size() &&
                  emu::last_block == unsigned(tile_rows * 2) && emu::last_smem == want_smem;
  std::printf(
      "%-4s %-34s grid %ux%u smem %zu ctas %lld mma %lld | convert %lld F16 (bad %lld) | "
      "checked %lld zero-rows %lld | max err/sum|products| %.2e; vs unrounded F32: err/bound "
      "%.2f (err/sum|products| %.2e, over %lld) | bad %lld stray %lld missing %lld\n",
      ok ? "ok" : "FAIL", c.name.c_str(), emu::last_grid_x, emu::last_grid_y, emu::last_smem,
      emu::n_ctas - ctas0, emu::n_mma - mma0, (long long)(x_rows * c.in), (long long)conv_bad,
      (long long)written_ok, (long long)zeros, max_norm, max_plain, max_plain_rel,
      (long long)plain_bad, (long long)bad, (long long)stray, (long long)missing);
  return ok;
}

int main(int argc, char** argv) {
  const auto [seed, only] = SetUpEmulation(argc, argv);
  int fails = !CheckF16Rounding();
  // The three decoders: Q6_K only in mode 3 (STEPSERVE_GROUPED_GEMM_F16=3; the default 2 takes
  // IQ4_XS and Q4_K, 1 IQ4_XS only).
  using stepserve::kernels::gemv_internal::GroupedGemmF16Applies;
  auto& setting = stepserve::kernels::gemv_internal::GroupedGemmF16Setting();
  setting.store(2);
  const bool mode_ok = GroupedGemmF16Applies(GgmlType::kQ4_K, 256, 1) &&
                       !GroupedGemmF16Applies(GgmlType::kQ6_K, 256, 1);
  setting.store(3);
  if (!mode_ok || !GroupedGemmF16Applies(GgmlType::kQ6_K, 1280, 1)) {
    std::printf("FAIL GroupedGemmF16Applies: Q6_K must take mode 3 (and only that)\n");
    ++fails;
  }
  if (!GroupedGemmF16Applies(GgmlType::kQ5_K, 4096, 8)) {
    std::printf("FAIL GroupedGemmF16Applies: Q5_K by default (STEPSERVE_Q5K_GROUPED_F16)\n");
    ++fails;
  }
  const int E = 5;
  // Chunks of 64 pairs: 1 group, exactly one chunk, one and a bit, two and a partial, one and 63;
  // unused and out-of-range (-1: zero rows) slots, an empty slot. Last chunks of every width class
  // of STEPSERVE_GEMM_F16_NARROW_TAILS (2 column tiles up to 16 columns, 4 up to 32, else 8) and
  // at each class's edges: 1, 2, 6, 9, 16 | 17, 22, 32 | 33, 63, 64. With wide chunks (IQ4_XS by
  // default, Q4_K and Q6_K under STEPSERVE_GEMM_F16_WIDE=2; 128 pairs: also 8 tiles up to 64
  // columns, 12 up to 96, else 16) the chunks are 1 | 2, 22 (150 = 128 + 22), 32 | 33, 64 | 65,
  // 96 | 97, 127, 128 and 129 = 128 + 1.
  const std::vector<SlotSpec> slots = {
      {1, 1},  {E - 1, 64}, {0, 65}, {kSlotUnused, 3}, {2, 150}, {-1, 70}, {3, 127},
      {4, 0},  {-1, 1},     {0, 2},  {kSlotUnused, 0}, {1, 73},  {2, 80},  {3, 81},
      {4, 96}, {0, 33},     {1, 97}, {2, 128},         {3, 129}};
  const std::vector<Case> cases = {
      // out: one whole tile, two tiles with 72 rows in the second (4 passes of 15 + 12), less than
      // a warp's share, two whole tiles, 15 rows past a tile (one pass), 16 rows (warp 0 only).
      {"in 256 out 128 div 1", 256, 128, 1, 3, 0, E, slots, 6},
      {"in 512 out 200 div 4", 512, 200, 4, 5, 4, E, slots, 7},
      {"in 768 out 64 div 1", 768, 64, 1, 0, 8, E, slots, 3},
      {"in 1024 out 256 div 4", 1024, 256, 4, 2, 0, E, slots, 4},
      {"in 1536 out 143 div 1 (6 blocks)", 1536, 143, 1, 1, 4, E, slots, 2},
      {"in 1280 out 16 div 4", 1280, 16, 4, 1, 12, E, slots, 5},
      // Q4_K (28 rows per copy pass: 128 = 4 passes + 16, 200 = 72 in the second tile).
      {"Q4_K in 256 out 128 div 1", 256, 128, 1, 3, 0, E, slots, 6, GgmlType::kQ4_K},
      {"Q4_K in 1280 out 200 div 4", 1280, 200, 4, 5, 4, E, slots, 7, GgmlType::kQ4_K},
      {"Q4_K in 768 out 143 div 1", 768, 143, 1, 1, 8, E, slots, 2, GgmlType::kQ4_K},
      // Q5_K (23 rows per copy pass: 128 = 5 passes + 13; 8 K slices of the attention `v`
      // projection are 512-wide matrices).
      {"Q5_K in 256 out 128 div 1", 256, 128, 1, 3, 0, E, slots, 6, GgmlType::kQ5_K},
      {"Q5_K in 512 out 200 div 4", 512, 200, 4, 5, 4, E, slots, 7, GgmlType::kQ5_K},
      {"Q5_K in 768 out 143 div 1", 768, 143, 1, 1, 8, E, slots, 2, GgmlType::kQ5_K},
      // Q6_K (18 rows per copy pass: 128 = 7 passes + 2). Block shifts in the staged rows: every
      // even 0..14 across the rows of unpadded 210-byte rows; 0, 2, .. 8 with the device's
      // 16-byte-padded 1056-byte rows (the expert down projection); 2..12 with the matrices 2 bytes
      // past a 16-byte boundary; and unpadded 1050-byte rows from 6 past one.
      {"Q6_K in 256 out 128 div 1 rows 210", 256, 128, 1, 3, 0, E, slots, 6, GgmlType::kQ6_K, 2},
      {"Q6_K in 1280 out 200 div 4", 1280, 200, 4, 5, 4, E, slots, 7, GgmlType::kQ6_K},
      {"Q6_K in 1536 out 143 div 1 base+2", 1536, 143, 1, 1, 8, E, slots, 2, GgmlType::kQ6_K, 16,
       2},
      {"Q6_K in 1280 out 72 div 1 rows 1050 base+6", 1280, 72, 1, 0, 4, E, slots, 3,
       GgmlType::kQ6_K, 2, 6},
      // The 2-3 bit decoders: padded rows (the device's), unpadded ones (every shift) and
      // matrices 2 bytes past a 16-byte boundary; Q2_K's 84-byte blocks stay 4-byte aligned.
      {"IQ2_XXS in 1280 out 200 div 4", 1280, 200, 4, 5, 4, E, slots, 7, GgmlType::kIQ2_XXS},
      {"IQ2_XXS in 768 out 143 div 1 rows 198", 768, 143, 1, 1, 8, E, slots, 2, GgmlType::kIQ2_XXS,
       2},
      {"IQ2_XS in 1280 out 200 div 4", 1280, 200, 4, 5, 4, E, slots, 7, GgmlType::kIQ2_XS},
      {"IQ2_XS in 768 out 143 div 1 rows 222 base+2", 768, 143, 1, 1, 8, E, slots, 2,
       GgmlType::kIQ2_XS, 2, 2},
      {"IQ2_S in 1536 out 128 div 1 rows 492", 1536, 128, 1, 3, 0, E, slots, 6, GgmlType::kIQ2_S,
       2},
      {"IQ3_XXS in 1536 out 128 div 1 base+2", 1536, 128, 1, 3, 0, E, slots, 6, GgmlType::kIQ3_XXS,
       16, 2},
      {"IQ3_XXS in 1280 out 72 div 4 rows 490", 1280, 72, 4, 0, 4, E, slots, 3, GgmlType::kIQ3_XXS,
       2},
      {"IQ3_S in 1280 out 200 div 4", 1280, 200, 4, 5, 4, E, slots, 7, GgmlType::kIQ3_S},
      {"IQ3_S in 768 out 143 div 1 rows 330 base+6", 768, 143, 1, 1, 8, E, slots, 2,
       GgmlType::kIQ3_S, 2, 6},
      {"Q2_K in 1280 out 200 div 4", 1280, 200, 4, 5, 4, E, slots, 7, GgmlType::kQ2_K},
      {"Q2_K in 768 out 143 div 1 rows 252", 768, 143, 1, 1, 8, E, slots, 2, GgmlType::kQ2_K, 4},
      {"Q3_K in 1280 out 200 div 4", 1280, 200, 4, 5, 4, E, slots, 7, GgmlType::kQ3_K},
      {"Q3_K in 768 out 143 div 1 rows 330 base+2", 768, 143, 1, 1, 8, E, slots, 2, GgmlType::kQ3_K,
       2, 2},
  };
  fails = RunCases(cases, only, seed, "F16 kernel, ", fails, RunCase);
  return fails != 0;
}
