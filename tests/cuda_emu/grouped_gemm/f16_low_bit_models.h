// Host models of the grouped F16 GEMM's 2-3 bit decoders
// (kernels/matmul/gemm_f16_decoders_grid.cuh) for test_f16.cc: each weight's integer value, its
// float sub-block scale as the CPU dequantizer computes it, and the kernel's F16 weight (the value
// times the F16-rounded scale, rounded once). Include after emu_cuda.h and test_quant_types.h.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "emu_cuda.h"
#include "engine/quant/float16.h"
#include "engine/quant/ggml_type.h"
#include "engine/quant/quant_tables.h"

using stepserve::F16ToF32;
using stepserve::F32ToF16;
using stepserve::GgmlType;

// The 2-3 bit decoders (gemm_f16_decoders_grid.cuh): element 32 ib + j's integer value and the
// float sub-block scale the CPU dequantizer computes (engine/quant/quant_iq.cc, quant_k.cc); the
// kernel's weight is the value times the F16-rounded scale, rounded to F16 once. *wp: the CPU
// dequantizer's weight, filled in by the caller.
inline uint32_t Le32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline int GridSign(uint32_t signs, int j) { return (signs >> j) & 1 ? -1 : 1; }
// The engine's ksigns_iq2xs table (not the kernels' parity computation, SignsFromIndex).
inline uint32_t SignsOf7(uint32_t k) { return stepserve::quant::kKsignsIq2xs[k]; }
inline void DecodeGrid(GgmlType type, const uint8_t* blk, int ib, int j, float* w16, double* wmag,
                       int8_t* wq) {
  namespace q = stepserve::quant;
  uint16_t dh;
  std::memcpy(&dh, blk, 2);
  const float d = F16ToF32(dh);
  int value = 0;
  float scale = 0.f;
  if (type == GgmlType::kIQ2_XXS) {
    const uint32_t sw = Le32(blk + 6 + 8 * ib);
    const int l = j / 8;
    value = int((q::kIq2xxsGrid[blk[2 + 8 * ib + l]] >> (8 * (j % 8))) & 0xFF) *
            GridSign(SignsOf7((sw >> (7 * l)) & 127), j % 8);
    scale = d * (0.5f + float(sw >> 28)) * 0.25f;
  } else if (type == GgmlType::kIQ3_XXS) {
    const uint32_t sw = Le32(blk + 66 + 4 * ib);
    value = int((q::kIq3xxsGrid[blk[2 + 8 * ib + j / 4]] >> (8 * (j % 4))) & 0xFF) *
            GridSign(SignsOf7((sw >> (7 * (j / 8))) & 127), j % 8);
    scale = d * (0.5f + float(sw >> 28)) * 0.5f;
  } else if (type == GgmlType::kIQ2_XS || type == GgmlType::kIQ2_S) {
    const int l = j / 8;
    int idx, sign;
    if (type == GgmlType::kIQ2_XS) {
      uint16_t v;
      std::memcpy(&v, blk + 2 + 2 * (4 * ib + l), 2);
      idx = v & 511;
      sign = GridSign(SignsOf7(v >> 9), j % 8);
    } else {
      idx = blk[2 + 4 * ib + l] | (((blk[66 + ib] >> (2 * l)) & 3) << 8);
      sign = GridSign(blk[34 + 4 * ib + l], j % 8);
    }
    const uint64_t* grid = type == GgmlType::kIQ2_XS ? q::kIq2xsGrid : q::kIq2sGrid;
    value = int((grid[idx] >> (8 * (j % 8))) & 0xFF) * sign;
    const int sc = blk[(type == GgmlType::kIQ2_XS ? 66 : 74) + ib];
    scale = d * (0.5f + float((sc >> (4 * (l / 2))) & 15)) * 0.25f;
  } else {  // IQ3_S
    const int g = j / 4;
    const int idx = blk[2 + 8 * ib + g] | (((blk[66 + ib] >> g) & 1) << 8);
    value = int((q::kIq3sGrid[idx] >> (8 * (j % 4))) & 0xFF) *
            GridSign(blk[74 + 4 * ib + j / 8], j % 8);
    scale = d * float(1 + 2 * ((blk[106 + ib / 2] >> (4 * (ib % 2))) & 15));
  }
  const float s16 = F16ToF32(F32ToF16(scale));
  *w16 = F16ToF32(emu::F16Round(double(value) * s16));
  *wmag = std::fabs(double(value) * scale);
  *wq = int8_t(value);
}
// Q2_K (scales[16], qs[64], d, dmin): q * s16 - m16 rounded once (an F16 fma), as Q4_K's.
inline void DecodeQ2K(const uint8_t* blk, int ib, int j, float* w16, double* wmag, int8_t* wq) {
  uint16_t dh, mh;
  std::memcpy(&dh, blk + 80, 2);
  std::memcpy(&mh, blk + 82, 2);
  const int h = ib / 4, k = ib % 4;
  const int q = (blk[16 + 32 * h + j] >> (2 * k)) & 3;
  const int sc = blk[8 * h + 2 * k + j / 16];
  const float s16 = F16ToF32(F32ToF16(F16ToF32(dh) * float(sc & 15)));
  const float m16 = F16ToF32(F32ToF16(F16ToF32(mh) * float(sc >> 4)));
  *w16 = F16ToF32(emu::F16Round(double(q) * s16 - double(m16)));
  *wmag =
      std::fabs(double(F16ToF32(dh)) * (sc & 15) * q) + std::fabs(double(F16ToF32(mh)) * (sc >> 4));
  *wq = int8_t(q);
}

// Q3_K (hmask[32], qs[64], scales[12], d): q in -4..3 times the F16-rounded d * (scale - 32).
inline void DecodeQ3K(const uint8_t* blk, int ib, int j, float* w16, double* wmag, int8_t* wq) {
  uint16_t dh;
  std::memcpy(&dh, blk + 108, 2);
  const int h = ib / 4, k = ib % 4, s = 8 * h + 2 * k + j / 16;
  const int q = ((blk[32 + 32 * h + j] >> (2 * k)) & 3) + 4 * ((blk[j] >> (4 * h + k)) & 1) - 4;
  const int low4 = s < 8 ? blk[96 + s] & 15 : blk[96 + s - 8] >> 4;
  const int high2 = (blk[104 + s % 4] >> (2 * (s / 4))) & 3;
  const float scale = F16ToF32(dh) * float((low4 | high2 << 4) - 32);
  *w16 = F16ToF32(emu::F16Round(double(q) * F16ToF32(F32ToF16(scale))));
  *wmag = std::fabs(double(q) * scale);
  *wq = int8_t(q);
}
