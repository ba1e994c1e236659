// The 32-element formats Q8_0, Q4_0 and IQ4_NL (spec B.4). Each output is one float32 product
// (int -> float is exact), matching ggml's reference dequantizers bit for bit.
#include <cmath>

#include "engine/quant/quant_internal.h"
#include "engine/quant/quant_tables.h"

namespace stepserve::quant::internal {

void DequantQ8_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 34, dst += 32) {
    const float d = LoadF16(src);
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(qs[j]) * d;
  }
}

void DequantQ4_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 18, dst += 32) {
    const float d = LoadF16(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>((qs[j] & 15) - 8) * d;
      dst[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantIQ4_NL(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 18, dst += 32) {
    const float d = LoadF16(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * static_cast<float>(kKvaluesIq4nl[qs[j] & 15]);
      dst[j + 16] = d * static_cast<float>(kKvaluesIq4nl[qs[j] >> 4]);
    }
  }
}

void QuantQ8_0(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 32, dst += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(src[j]));
    const uint16_t d16 = F32ToF16(amax / 127.0f);
    StoreU16(dst, d16);
    // Divide by the stored (rounded) scale so that q * d reproduces x as closely as possible.
    const float d = F16ToF32(d16);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float q = std::fmin(127.0f, std::fmax(-127.0f, std::nearbyint(src[j] * id)));
      dst[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
  }
}

}  // namespace stepserve::quant::internal
