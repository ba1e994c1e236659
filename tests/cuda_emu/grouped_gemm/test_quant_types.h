// The block types the dp4a GEMV emulation tests (test_gemv_one_row.cc, test_gemv_grouped.cc) run,
// with what a test needs of each: the block size, the engine's CPU dequantizer (engine/quant, the
// reference), where the block's F16 scales sit (set to finite values of mixed sign; every other
// byte stays random, which is a valid block for these types), the activation order, and the
// i-quant grids the kernels take through GemvParams. Include after test_common.h.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>

#include "engine/quant/ggml_type.h"
#include "engine/quant/quant_internal.h"
#include "engine/quant/quant_tables.h"
#include "test_common.h"

struct EmuQuantType {
  const char* name;
  stepserve::GgmlType type;
  int64_t block_bytes;
  void (*dequant)(const uint8_t*, float*, int64_t);
  int scale_offset;  // the block's F16 d
  bool two_scales;   // a second F16 (dmin) follows d
  bool pair_order;   // IQ4_XS takes pair-ordered activations
};

inline EmuQuantType EmuType(stepserve::GgmlType t) {
  namespace qi = stepserve::quant::internal;
  using stepserve::GgmlType;
  switch (t) {
    case GgmlType::kQ4_K:
      return {"Q4_K", t, 144, qi::DequantQ4_K, 0, true, false};
    case GgmlType::kQ5_K:
      return {"Q5_K", t, 176, qi::DequantQ5_K, 0, true, false};
    case GgmlType::kQ6_K:
      return {"Q6_K", t, 210, qi::DequantQ6_K, 208, false, false};
    case GgmlType::kQ2_K:
      return {"Q2_K", t, 84, qi::DequantQ2_K, 80, true, false};
    case GgmlType::kQ3_K:
      return {"Q3_K", t, 110, qi::DequantQ3_K, 108, false, false};
    case GgmlType::kIQ2_XXS:
      return {"IQ2_XXS", t, 66, qi::DequantIQ2_XXS, 0, false, false};
    case GgmlType::kIQ2_XS:
      return {"IQ2_XS", t, 74, qi::DequantIQ2_XS, 0, false, false};
    case GgmlType::kIQ2_S:
      return {"IQ2_S", t, 82, qi::DequantIQ2_S, 0, false, false};
    case GgmlType::kIQ3_XXS:
      return {"IQ3_XXS", t, 98, qi::DequantIQ3_XXS, 0, false, false};
    case GgmlType::kIQ3_S:
      return {"IQ3_S", t, 110, qi::DequantIQ3_S, 0, false, false};
    default:
      return {"IQ4_XS", GgmlType::kIQ4_XS, 136, qi::DequantIQ4_XS, 0, false, true};
  }
}

// `experts` random matrices of out x in with finite, mixed-sign scales (rows padded to 16 bytes).
inline QuantMatrices RandomWeights(int experts, int64_t out, int64_t in, const EmuQuantType& t,
                                   std::mt19937& rng) {
  QuantMatrices wm(experts, out, in, t.block_bytes, rng);
  std::uniform_real_distribution<float> ud(0.5f, 2.0f);
  const auto scale = [&] { return ud(rng) * 1e-3f * ((rng() & 1) ? 1.f : -1.f); };
  wm.SetScales(experts, out, scale, t.scale_offset);
  if (t.two_scales) wm.SetScales(experts, out, scale, t.scale_offset + 2);
  return wm;
}

// One weight row (nb blocks) against logical-order int8 activations xl with per-32 scales
// xd[].x, in double: the dot and the sum of its terms' magnitudes.
struct RowDot {
  double acc = 0, abs_acc = 0;
};
inline RowDot DotRow(const EmuQuantType& t, const uint8_t* row, int64_t nb, const int8_t* xl,
                     const float2* xd) {
  std::vector<float> w(nb * 256);
  t.dequant(row, w.data(), nb);
  RowDot r;
  for (int64_t e = 0; e < nb * 256; ++e) {
    const double term = double(w[e]) * xl[e] * double(xd[e / 32].x);
    r.acc += term;
    r.abs_acc += std::fabs(term);
  }
  return r;
}

// The grids as GemvParams takes them (host copies here) and their registration as global buffers
// (emu::check_global_loads).
template <class Params>
void SetGridTables(Params* p) {
  namespace q = stepserve::quant;
  p->iq2xxs_grid = q::kIq2xxsGrid;
  p->iq2xs_grid = q::kIq2xsGrid;
  p->iq2s_grid = q::kIq2sGrid;
  p->iq3xxs_grid = q::kIq3xxsGrid;
  p->iq3s_grid = q::kIq3sGrid;
}
inline void AddGridTableGlobals() {
  namespace q = stepserve::quant;
  emu::AddGlobal(q::kIq2xxsGrid, sizeof(q::kIq2xxsGrid));
  emu::AddGlobal(q::kIq2xsGrid, sizeof(q::kIq2xsGrid));
  emu::AddGlobal(q::kIq2sGrid, sizeof(q::kIq2sGrid));
  emu::AddGlobal(q::kIq3xxsGrid, sizeof(q::kIq3xxsGrid));
  emu::AddGlobal(q::kIq3sGrid, sizeof(q::kIq3sGrid));
}
