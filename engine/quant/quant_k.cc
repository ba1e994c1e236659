// Dequantizers of the K-quants Q2_K..Q8_K (spec B.5). Every output follows the float32 rounding
// order of B.9 (e.g. Q4_K: f32(f32(f32(d*sc)*q) - f32(dmin*m))); the library is built with
// -ffp-contract=off so no FMA merges the multiply and the subtraction.
#include "engine/quant/quant_internal.h"

namespace stepserve::quant::internal {

void DequantQ2_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 84, dst += 256) {
    const uint8_t* scales = src;
    const uint8_t* qs = src + 16;
    const float d = LoadF16(src + 80);
    const float dmin = LoadF16(src + 82);
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 4; ++k) {
        for (int half = 0; half < 2; ++half) {
          const int sc = scales[8 * h + 2 * k + half];
          const float dl = d * static_cast<float>(sc & 15);
          const float ml = dmin * static_cast<float>(sc >> 4);
          float* y = dst + 128 * h + 32 * k + 16 * half;
          const uint8_t* q = qs + 32 * h + 16 * half;
          for (int l = 0; l < 16; ++l) {
            y[l] = dl * static_cast<float>((q[l] >> (2 * k)) & 3) - ml;
          }
        }
      }
    }
  }
}

void DequantQ3_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 110, dst += 256) {
    const uint8_t* hmask = src;
    const uint8_t* qs = src + 32;
    const uint8_t* s = src + 96;
    const float d = LoadF16(src + 108);
    int scale[16];
    for (int i = 0; i < 16; ++i) {
      const int low4 = i < 8 ? (s[i] & 15) : (s[i - 8] >> 4);
      const int high2 = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
      scale[i] = (low4 | (high2 << 4)) - 32;
    }
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 4; ++k) {
        const int hbit_shift = 4 * h + k;  // = e / 32
        for (int half = 0; half < 2; ++half) {
          const float dl = d * static_cast<float>(scale[8 * h + 2 * k + half]);
          float* y = dst + 128 * h + 32 * k + 16 * half;
          const uint8_t* q = qs + 32 * h + 16 * half;
          const uint8_t* hm = hmask + 16 * half;
          for (int l = 0; l < 16; ++l) {
            // A set hmask bit means "no offset" (spec B.5, Q3_K).
            const int q3 = ((q[l] >> (2 * k)) & 3) - (((hm[l] >> hbit_shift) & 1) ? 0 : 4);
            y[l] = dl * static_cast<float>(q3);
          }
        }
      }
    }
  }
}

void DequantQ4_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 144, dst += 256) {
    const float d = LoadF16(src);
    const float dmin = LoadF16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qs = src + 16;
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      UnpackScaleMinK4(j, scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc);
      const float m1 = dmin * static_cast<float>(m);
      const uint8_t* q = qs + 32 * (j / 2);
      const int shift = 4 * (j & 1);
      float* y = dst + 32 * j;
      for (int l = 0; l < 32; ++l) y[l] = d1 * static_cast<float>((q[l] >> shift) & 15) - m1;
    }
  }
}

void DequantQ5_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 176, dst += 256) {
    const float d = LoadF16(src);
    const float dmin = LoadF16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* qs = src + 48;
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      UnpackScaleMinK4(j, scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc);
      const float m1 = dmin * static_cast<float>(m);
      const uint8_t* q = qs + 32 * (j / 2);
      const int shift = 4 * (j & 1);
      float* y = dst + 32 * j;
      for (int l = 0; l < 32; ++l) {
        const int q5 = ((q[l] >> shift) & 15) | (((qh[l] >> j) & 1) << 4);
        y[l] = d1 * static_cast<float>(q5) - m1;
      }
    }
  }
}

void DequantQ6_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 210, dst += 256) {
    const float d = LoadF16(src + 208);
    const int8_t* scales = reinterpret_cast<const int8_t*>(src + 192);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = src + 64 * h;
      const uint8_t* qh = src + 128 + 32 * h;
      for (int k = 0; k < 4; ++k) {
        const uint8_t* low = ql + 32 * (k % 2);
        const int low_shift = k < 2 ? 0 : 4;
        for (int half = 0; half < 2; ++half) {
          // (d * scale) * q, not d * (scale * q) (spec B.9).
          const float dl = d * static_cast<float>(scales[8 * h + 2 * k + half]);
          float* y = dst + 128 * h + 32 * k + 16 * half;
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const int q = (((low[l] >> low_shift) & 15) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
            y[l - 16 * half] = dl * static_cast<float>(q);
          }
        }
      }
    }
  }
}

void DequantQ8_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 292, dst += 256) {
    const float d = LoadF32(src);
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 4);
    for (int j = 0; j < 256; ++j) dst[j] = d * static_cast<float>(qs[j]);
  }
}

}  // namespace stepserve::quant::internal
