// Round-to-nearest quantizers for Q4_K and Q6_K. They are simpler than ggml's search-based
// quantizers (make_qkx2_quants / make_qx_quants): good enough for synthetic models and tests, not
// for shipping weights. Scales are quantized first, then each q is rounded against the scale the
// decoder will actually use (the stored f16 super-scale times the integer sub-scale).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/quant/quant_internal.h"

namespace stepserve::quant::internal {
namespace {

inline int RoundClamp(float v, int lo, int hi) {
  const float r = std::nearbyint(v);
  if (!(r >= static_cast<float>(lo))) return lo;  // also maps NaN to lo
  if (r > static_cast<float>(hi)) return hi;
  return static_cast<int>(r);
}

}  // namespace

void QuantQ4_K(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 256, dst += 144) {
    // Per 32-element sub-block: x ~= scale * q - min with q in 0..15 and min >= 0.
    float scale[8], min[8];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
      float lo = 0.0f, hi = 0.0f;  // the range always includes 0 (mins are unsigned)
      for (int l = 0; l < 32; ++l) {
        lo = std::fmin(lo, src[32 * j + l]);
        hi = std::fmax(hi, src[32 * j + l]);
      }
      scale[j] = (hi - lo) / 15.0f;
      min[j] = -lo;
      max_scale = std::fmax(max_scale, scale[j]);
      max_min = std::fmax(max_min, min[j]);
    }
    const uint16_t d16 = F32ToF16(max_scale / 63.0f);
    const uint16_t dmin16 = F32ToF16(max_min / 63.0f);
    const float d = F16ToF32(d16);
    const float dmin = F16ToF32(dmin16);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<uint8_t>(d > 0.0f ? RoundClamp(scale[j] / d, 0, 63) : 0);
      m[j] = static_cast<uint8_t>(dmin > 0.0f ? RoundClamp(min[j] / dmin, 0, 63) : 0);
    }
    StoreU16(dst, d16);
    StoreU16(dst + 2, dmin16);
    PackScaleMinK4(sc, m, dst + 4);
    uint8_t* qs = dst + 16;
    std::memset(qs, 0, 128);
    for (int j = 0; j < 8; ++j) {
      const float d1 = d * static_cast<float>(sc[j]);
      const float m1 = dmin * static_cast<float>(m[j]);
      const float inv = d1 > 0.0f ? 1.0f / d1 : 0.0f;
      for (int l = 0; l < 32; ++l) {
        const int q = RoundClamp((src[32 * j + l] + m1) * inv, 0, 15);
        qs[32 * (j / 2) + l] |= static_cast<uint8_t>(q << (4 * (j & 1)));
      }
    }
  }
}

void QuantQ6_K(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 256, dst += 210) {
    // Per 16-element sub-block: x ~= scale * q with q in -32..31; scale >= 0 here.
    float scale[16];
    float max_scale = 0.0f;
    for (int s = 0; s < 16; ++s) {
      float amax = 0.0f;
      for (int l = 0; l < 16; ++l) amax = std::fmax(amax, std::fabs(src[16 * s + l]));
      scale[s] = amax / 31.0f;
      max_scale = std::fmax(max_scale, scale[s]);
    }
    const uint16_t d16 = F32ToF16(max_scale / 127.0f);
    const float d = F16ToF32(d16);
    int8_t sc[16];
    for (int s = 0; s < 16; ++s) {
      sc[s] = static_cast<int8_t>(d > 0.0f ? RoundClamp(scale[s] / d, 0, 127) : 0);
    }
    uint8_t* ql = dst;
    uint8_t* qh = dst + 128;
    std::memset(dst, 0, 192);
    std::memcpy(dst + 192, sc, 16);
    StoreU16(dst + 208, d16);
    for (int e = 0; e < 256; ++e) {
      const float dl = d * static_cast<float>(sc[e / 16]);
      const int q = (dl > 0.0f ? RoundClamp(src[e] / dl, -32, 31) : 0) + 32;  // 0..63
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      ql[64 * h + 32 * (k % 2) + l] |= static_cast<uint8_t>((q & 15) << (k < 2 ? 0 : 4));
      qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * k));
    }
  }
}

}  // namespace stepserve::quant::internal
