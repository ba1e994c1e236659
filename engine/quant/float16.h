// IEEE binary16 and bfloat16 <-> float32 conversions (spec B.2). Header-only so kernels and the
// reader can inline them.
#ifndef STEPSERVE_ENGINE_QUANT_FLOAT16_H_
#define STEPSERVE_ENGINE_QUANT_FLOAT16_H_

#include <cstdint>
#include <cstring>

namespace stepserve {

inline float F16ToF32(uint16_t h) {
  // Branch-free for finite values (the dequantizers' hot path): placing the 15 exponent+mantissa
  // bits at float32 bit 13 gives the half's value times 2^-112 (normals and subnormals alike), and
  // multiplying by 2^112 is exact. Requires subnormals to be honoured (no -ffast-math / DAZ).
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t magnitude = h & 0x7fffu;
  uint32_t bits;
  if (magnitude >= 0x7c00u) {  // inf / NaN (NaN payload shifted and quieted as ggml does)
    const uint32_t mantissa = magnitude & 0x3ffu;
    bits = sign | 0x7f800000u | (mantissa << 13) | (mantissa ? 0x00400000u : 0u);
  } else {
    const uint32_t scaled_bits = magnitude << 13;
    float scaled;
    std::memcpy(&scaled, &scaled_bits, sizeof scaled);
    const float value = scaled * 0x1p112f;
    std::memcpy(&bits, &value, sizeof bits);
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even; overflow gives inf, NaN stays NaN.
inline uint16_t F32ToF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u);
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds past the largest half
  if (abs < 0x38800000u) {                        // subnormal half or zero
    if (abs < 0x33000000u) return sign;           // below half the smallest subnormal
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t half = ((abs >> 13) - (112u << 10));
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return sign | static_cast<uint16_t>(half);
}

inline float BF16ToF32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even; NaN stays a quiet NaN.
inline uint16_t F32ToBF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_QUANT_FLOAT16_H_
