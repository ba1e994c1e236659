// Dequantizers of the i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S and IQ4_XS (spec B.6).
// Grid entries are read as little-endian byte arrays (byte j = element j). Signs are applied
// after the rounded product, as ggml does, so y = +-f32(db * g) exactly.
#include <cstring>

#include "engine/quant/quant_internal.h"
#include "engine/quant/quant_tables.h"

namespace stepserve::quant::internal {
namespace {

// Writes 8 outputs db * grid byte j, negated where bit j of `signs` is set. The sign is applied by
// flipping the float's sign bit (exactly what multiplying the rounded product by -1 does), which
// keeps the loop branch-free.
inline void Emit8(float db, uint64_t grid, uint32_t signs, float* y) {
  uint8_t g[8];
  std::memcpy(g, &grid, sizeof g);
  for (int j = 0; j < 8; ++j) {
    const float v = db * static_cast<float>(g[j]);
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    bits ^= ((signs >> j) & 1u) << 31;
    std::memcpy(y + j, &bits, sizeof bits);
  }
}

// The same for two 4-byte grid entries (the IQ3 grids cover 4 elements each).
inline void Emit4x2(float db, uint32_t grid_lo, uint32_t grid_hi, uint32_t signs, float* y) {
  Emit8(db, static_cast<uint64_t>(grid_lo) | (static_cast<uint64_t>(grid_hi) << 32), signs, y);
}

}  // namespace

void DequantIQ2_XXS(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 66, dst += 256) {
    const float d = LoadF16(src);
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* g = src + 2 + 8 * ib;
      const uint32_t w = LoadU32(g + 4);
      const float db = d * (0.5f + static_cast<float>(w >> 28)) * 0.25f;
      for (int l = 0; l < 4; ++l) {
        Emit8(db, kIq2xxsGrid[g[l]], kKsignsIq2xs[(w >> (7 * l)) & 127], dst + 32 * ib + 8 * l);
      }
    }
  }
}

void DequantIQ2_XS(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 74, dst += 256) {
    const float d = LoadF16(src);
    const uint8_t* scales = src + 66;
    for (int ib = 0; ib < 8; ++ib) {
      const float db_lo = d * (0.5f + static_cast<float>(scales[ib] & 15)) * 0.25f;
      const float db_hi = d * (0.5f + static_cast<float>(scales[ib] >> 4)) * 0.25f;
      for (int l = 0; l < 4; ++l) {
        const uint16_t v = LoadU16(src + 2 + 2 * (4 * ib + l));
        Emit8(l < 2 ? db_lo : db_hi, kIq2xsGrid[v & 511], kKsignsIq2xs[v >> 9],
              dst + 32 * ib + 8 * l);
      }
    }
  }
}

void DequantIQ2_S(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 82, dst += 256) {
    const float d = LoadF16(src);
    const uint8_t* qs = src + 2;
    const uint8_t* signs = src + 34;
    const uint8_t* qh = src + 66;
    const uint8_t* scales = src + 74;
    for (int ib = 0; ib < 8; ++ib) {
      const float db_lo = d * (0.5f + static_cast<float>(scales[ib] & 15)) * 0.25f;
      const float db_hi = d * (0.5f + static_cast<float>(scales[ib] >> 4)) * 0.25f;
      for (int l = 0; l < 4; ++l) {
        const int idx = qs[4 * ib + l] | (((qh[ib] >> (2 * l)) & 3) << 8);
        Emit8(l < 2 ? db_lo : db_hi, kIq2sGrid[idx], signs[4 * ib + l], dst + 32 * ib + 8 * l);
      }
    }
  }
}

void DequantIQ3_XXS(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 98, dst += 256) {
    const float d = LoadF16(src);
    const uint8_t* qs = src + 2;
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t w = LoadU32(src + 66 + 4 * ib);
      const float db = d * (0.5f + static_cast<float>(w >> 28)) * 0.5f;
      for (int l = 0; l < 4; ++l) {
        Emit4x2(db, kIq3xxsGrid[qs[8 * ib + 2 * l]], kIq3xxsGrid[qs[8 * ib + 2 * l + 1]],
                kKsignsIq2xs[(w >> (7 * l)) & 127], dst + 32 * ib + 8 * l);
      }
    }
  }
}

void DequantIQ3_S(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 110, dst += 256) {
    const float d = LoadF16(src);
    const uint8_t* qs = src + 2;
    const uint8_t* qh = src + 66;
    const uint8_t* signs = src + 74;
    const uint8_t* scales = src + 106;
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = (scales[ib / 2] >> (4 * (ib % 2))) & 15;
      const float db = d * static_cast<float>(1 + 2 * ls);
      for (int l = 0; l < 4; ++l) {
        const int g0 = 2 * l;
        const int idx0 = qs[8 * ib + g0] | (((qh[ib] >> g0) & 1) << 8);
        const int idx1 = qs[8 * ib + g0 + 1] | (((qh[ib] >> (g0 + 1)) & 1) << 8);
        Emit4x2(db, kIq3sGrid[idx0], kIq3sGrid[idx1], signs[4 * ib + l], dst + 32 * ib + 8 * l);
      }
    }
  }
}

void DequantIQ4_XS(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 136, dst += 256) {
    const float d = LoadF16(src);
    const uint16_t scales_h = LoadU16(src + 2);
    const uint8_t* scales_l = src + 4;
    const uint8_t* qs = src + 8;
    for (int ib = 0; ib < 8; ++ib) {
      const int ls =
          ((scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((scales_h >> (2 * ib)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      const uint8_t* q = qs + 16 * ib;
      float* y = dst + 32 * ib;
      for (int t = 0; t < 16; ++t) {
        y[t] = dl * static_cast<float>(kKvaluesIq4nl[q[t] & 15]);
        y[t + 16] = dl * static_cast<float>(kKvaluesIq4nl[q[t] >> 4]);
      }
    }
  }
}

}  // namespace stepserve::quant::internal
