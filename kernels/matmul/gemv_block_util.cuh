// Device helpers shared by the GEMV kernels (gemv_f32x_cuda.cu, gemv_q8x_pieces.cuh): half and
// byte extraction, exact int -> float, and the 6-bit scale/min pairs of the Q4_K/Q5_K header.
#ifndef STEPSERVE_KERNELS_MATMUL_GEMV_BLOCK_UTIL_CUH_
#define STEPSERVE_KERNELS_MATMUL_GEMV_BLOCK_UTIL_CUH_

#include <cstdint>

namespace stepserve::kernels::gemv_internal {

// The F16 in the low 16 bits of h, as float.
__device__ __forceinline__ float F16Bits(uint32_t h) {
  float f;
  const unsigned short s = static_cast<unsigned short>(h);
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(s));
  return f;
}

// Exact int -> float for |i| < 2^22: place i in the mantissa of 1.5 * 2^23 and subtract: an
// integer and a float add, where I2F runs at 16 per clock per SM against 64 integer and 128 float
// adds (CUDA guide throughput table; the XU pipe on Hopper).
// (BiasedIntToFloat: the second half, for an i that already carries kIntToFloatBias.)
inline constexpr int kIntToFloatBias = 0x4B400000;  // the bits of 1.5 * 2^23
__device__ __forceinline__ float BiasedIntToFloat(int biased) {
  return __int_as_float(biased) - 12582912.0f;
}
__device__ __forceinline__ float IntToFloat(int i) { return BiasedIntToFloat(kIntToFloatBias + i); }

__device__ __forceinline__ uint32_t Byte(uint32_t word, int k) { return (word >> (8 * k)) & 0xFFu; }

// The 6-bit scale of sub-block ib (0..7) of an IQ4_XS block whose first 8 bytes are h (d and
// scales_h in h.x, scales_l in h.y): low 4 bits nibble ib of scales_l, high 2 bits bits 2 ib,
// 2 ib + 1 of scales_h. Each word is shifted straight to its field (4 ib; 12 + 2 ib puts the two
// bits at 4-5): two shifts by lane constants and one merge, where the byte-then-nibble form
// (Byte(h.y, ib / 2) >> 4 (ib % 2)) had the compiler rebuild three shift amounts every block.
__device__ __forceinline__ uint32_t Iq4XsSubScale(uint2 h, int ib) {
  return ((h.y >> (4 * ib)) & 15u) | ((h.x >> (12 + 2 * ib)) & 0x30u);
}

// Byte k (0..11) of the Q4_K scale field held in the last three words of the block header h.
__device__ __forceinline__ uint32_t ScaleByte(uint4 h, int k) {
  const uint32_t word = k < 4 ? h.y : (k < 8 ? h.z : h.w);
  return Byte(word, k & 3);
}

// Scale and min (6 bits each) of sub-block j (0..7) of a Q4_K/Q5_K block header.
__device__ __forceinline__ void ScaleMinK4(uint4 h, int j, uint32_t* sc, uint32_t* m) {
  if (j < 4) {
    *sc = ScaleByte(h, j) & 63;
    *m = ScaleByte(h, j + 4) & 63;
  } else {
    *sc = (ScaleByte(h, j + 4) & 15) | ((ScaleByte(h, j - 4) >> 6) << 4);
    *m = (ScaleByte(h, j + 4) >> 4) | ((ScaleByte(h, j) >> 6) << 4);
  }
}

}  // namespace stepserve::kernels::gemv_internal

#endif  // STEPSERVE_KERNELS_MATMUL_GEMV_BLOCK_UTIL_CUH_
