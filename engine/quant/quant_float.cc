// F32, F16 and BF16 rows (spec B.3): one element per "block".
#include <cstring>

#include "engine/quant/float16.h"
#include "engine/quant/quant_internal.h"

namespace stepserve::quant::internal {

void DequantF32(const uint8_t* src, float* dst, int64_t n_blocks) {
  std::memcpy(dst, src, static_cast<size_t>(n_blocks) * sizeof(float));
}

void DequantF16(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) dst[i] = LoadF16(src + 2 * i);
}

void DequantBF16(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    // bf16 is the top half of a float32: widen by shifting (exact).
    const uint32_t bits = static_cast<uint32_t>(LoadU16(src + 2 * i)) << 16;
    std::memcpy(dst + i, &bits, sizeof bits);
  }
}

void QuantF32(const float* src, uint8_t* dst, int64_t n_blocks) {
  std::memcpy(dst, src, static_cast<size_t>(n_blocks) * sizeof(float));
}

void QuantF16(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) StoreU16(dst + 2 * i, F32ToF16(src[i]));
}

void QuantBF16(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) StoreU16(dst + 2 * i, F32ToBF16(src[i]));
}

}  // namespace stepserve::quant::internal
