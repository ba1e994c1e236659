// DotRow: the CPU matmul inner loop. Dequantizes up to 256 elements at a time into a stack buffer
// and accumulates into 8 independent partial sums, which lets the compiler vectorize the
// multiply-add without -ffast-math (float addition is not associative, so it would not reorder a
// single running sum by itself).
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/quant/quant.h"
#include "engine/quant/quant_internal.h"

namespace stepserve::quant {
namespace {

constexpr int kChunk = 256;  // elements per stack buffer: one super-block, or 8 small blocks

inline void Accumulate(const float* w, const float* x, int64_t len, float acc[8]) {
  int64_t k = 0;
  for (; k + 8 <= len; k += 8) {
    for (int t = 0; t < 8; ++t) acc[t] += w[k + t] * x[k + t];
  }
  for (; k < len; ++k) acc[0] += w[k] * x[k];
}

}  // namespace

float DotRow(GgmlType type, const void* blocks, const float* x, int64_t n) {
  const internal::Codec* codec = internal::FindCodec(type);
  if (codec == nullptr || n < 0 || n % codec->block_elems != 0) {
    return std::numeric_limits<float>::quiet_NaN();
  }
  const uint8_t* src = static_cast<const uint8_t*>(blocks);
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  alignas(64) float buf[kChunk];
  const int64_t blocks_per_chunk = kChunk / codec->block_elems;
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min<int64_t>(kChunk, n - i);
    const int64_t nb = len / codec->block_elems;
    codec->dequant(src, buf, nb);
    Accumulate(buf, x + i, len, acc);
    src += blocks_per_chunk * codec->block_bytes;
  }
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

}  // namespace stepserve::quant
