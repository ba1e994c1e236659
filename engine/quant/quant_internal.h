// Internals shared by the block-format files (quant_*.cc): unaligned little-endian loads, the
// per-type kernels each family file defines, and the dispatch table that quant.cc builds on.
// Not part of the public API; include only from engine/quant and its tests.
#ifndef STEPSERVE_ENGINE_QUANT_QUANT_INTERNAL_H_
#define STEPSERVE_ENGINE_QUANT_QUANT_INTERNAL_H_

#include <bit>
#include <cstdint>
#include <cstring>

#include "engine/quant/float16.h"
#include "engine/quant/ggml_type.h"

namespace stepserve::quant::internal {

// GGUF data is little-endian; loads below are plain memcpy (unaligned-safe), valid on LE hosts.
static_assert(std::endian::native == std::endian::little, "stepserve assumes a little-endian host");

inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline uint64_t LoadU64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline float LoadF16(const uint8_t* p) { return F16ToF32(LoadU16(p)); }
inline float LoadF32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void StoreU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, sizeof v); }
inline void StoreF32(uint8_t* p, float v) { std::memcpy(p, &v, sizeof v); }

// Scale/min unpacking shared by Q4_K and Q5_K (spec B.5, "6-bit scale/min packing").
inline void UnpackScaleMinK4(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}
// The inverse: sc[8], m[8] each 0..63 into 12 bytes.
inline void PackScaleMinK4(const uint8_t* sc, const uint8_t* m, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

// Kernels work on whole blocks: `n_blocks` blocks at `src` -> n_blocks * block_elems floats.
using DequantFn = void (*)(const uint8_t* src, float* dst, int64_t n_blocks);
using QuantFn = void (*)(const float* src, uint8_t* dst, int64_t n_blocks);

// quant_float.cc (block = 1 element)
void DequantF32(const uint8_t* src, float* dst, int64_t n_blocks);
void DequantF16(const uint8_t* src, float* dst, int64_t n_blocks);
void DequantBF16(const uint8_t* src, float* dst, int64_t n_blocks);
void QuantF32(const float* src, uint8_t* dst, int64_t n_blocks);
void QuantF16(const float* src, uint8_t* dst, int64_t n_blocks);
void QuantBF16(const float* src, uint8_t* dst, int64_t n_blocks);
// quant_legacy.cc (32-element blocks)
void DequantQ8_0(const uint8_t* src, float* dst, int64_t n_blocks);
void DequantQ4_0(const uint8_t* src, float* dst, int64_t n_blocks);
void DequantIQ4_NL(const uint8_t* src, float* dst, int64_t n_blocks);
void QuantQ8_0(const float* src, uint8_t* dst, int64_t n_blocks);
// quant_k.cc (256-element super-blocks)
void DequantQ2_K(const uint8_t* src, float* dst, int64_t n_blocks);
void DequantQ3_K(const uint8_t* src, float* dst, int64_t n_blocks);
void DequantQ4_K(const uint8_t* src, float* dst, int64_t n_blocks);
void DequantQ5_K(const uint8_t* src, float* dst, int64_t n_blocks);
void DequantQ6_K(const uint8_t* src, float* dst, int64_t n_blocks);
void DequantQ8_K(const uint8_t* src, float* dst, int64_t n_blocks);
// quant_k_quantize.cc
void QuantQ4_K(const float* src, uint8_t* dst, int64_t n_blocks);
void QuantQ6_K(const float* src, uint8_t* dst, int64_t n_blocks);
// quant_iq.cc
void DequantIQ2_XXS(const uint8_t* src, float* dst, int64_t n_blocks);
void DequantIQ2_XS(const uint8_t* src, float* dst, int64_t n_blocks);
void DequantIQ2_S(const uint8_t* src, float* dst, int64_t n_blocks);
void DequantIQ3_XXS(const uint8_t* src, float* dst, int64_t n_blocks);
void DequantIQ3_S(const uint8_t* src, float* dst, int64_t n_blocks);
void DequantIQ4_XS(const uint8_t* src, float* dst, int64_t n_blocks);

struct Codec {
  GgmlType type;
  int64_t block_elems;
  int64_t block_bytes;
  DequantFn dequant;  // never null in the table
  QuantFn quant;      // null where QuantizeRow is not supported
};

// The codec of a dequantizable type, or nullptr (quant.cc).
const Codec* FindCodec(GgmlType type);

}  // namespace stepserve::quant::internal

#endif  // STEPSERVE_ENGINE_QUANT_QUANT_INTERNAL_H_
