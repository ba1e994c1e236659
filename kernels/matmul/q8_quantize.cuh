// The int8 activation quantization of the GEMV (the kQ8 scratch of matmul_cuda.h), as device
// pieces for any kernel whose 8 consecutive threads hold the 8 float4s of one 32-value block:
// QuantizeQ8Kernel (gemv_q8x_cuda.cu), and the norms that write their output's int8 form as well
// (rms_norm_cuda.cu, so the GEMV after them skips its quantizer). One definition, so both write
// the same bytes. Include from .cu files only.
#ifndef STEPSERVE_KERNELS_MATMUL_Q8_QUANTIZE_CUH_
#define STEPSERVE_KERNELS_MATMUL_Q8_QUANTIZE_CUH_

#include <cstdint>

#include "kernels/matmul/gemv_cuda_internal.h"

namespace stepserve::kernels::q8_quantize {

// One thread's 4 values of a block: packed int8 bytes, and the block's scale d and integer sum
// (the same in all 8 threads of the group after the shuffles).
struct Q8Four {
  uint32_t packed;
  float d;
  int sum;
};

// d = amax / 127 over the block, q = round-to-nearest-even(v / d) by IEEE division (a host
// reference reproduces every byte), the sum of the block's q. `mask`: the 8-lane group's bits.
__device__ __forceinline__ Q8Four QuantizeQ8Four(float4 v, unsigned mask) {
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int off = 4; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(mask, amax, off));
  const float d = amax / 127.0f;
  int q[4] = {0, 0, 0, 0};
  if (d > 0.f) {
    q[0] = __float2int_rn(v.x / d);
    q[1] = __float2int_rn(v.y / d);
    q[2] = __float2int_rn(v.z / d);
    q[3] = __float2int_rn(v.w / d);
  }
  int sum = q[0] + q[1] + q[2] + q[3];
#pragma unroll
  for (int off = 4; off > 0; off >>= 1) sum += __shfl_xor_sync(mask, sum, off);
  const uint32_t packed =
      (static_cast<uint32_t>(q[0]) & 0xFFu) | ((static_cast<uint32_t>(q[1]) & 0xFFu) << 8) |
      ((static_cast<uint32_t>(q[2]) & 0xFFu) << 16) | ((static_cast<uint32_t>(q[3]) & 0xFFu) << 24);
  return Q8Four{packed, d, sum};
}

// Stores thread j's (j = threadIdx.x & 7) share of the block whose first value is element k (a
// multiple of 4 within the row; the block starts at k & ~31): its int8 bytes into the row's
// values `xq_row`, in natural order or in IQ4_XS's pair order (Q8ScratchPosition: thread j < 4
// holds elements 4j..4j+3 and thread j + 4 elements 16+4j..; j interleaves the two into bytes
// 8j..8j+7), and thread 0 the block's {d, d * sum} into `xd_row`. Every thread of the group must
// call it (the pair order shuffles).
__device__ __forceinline__ void StoreQ8Four(const Q8Four& q, int64_t k, int8_t* xq_row,
                                            float2* xd_row, bool pair_order, unsigned mask) {
  if (pair_order) {
    const uint32_t partner = __shfl_down_sync(mask, q.packed, 4, 8);
    const int j = threadIdx.x & 7;
    if (j < 4) {
      const int64_t block = k & ~int64_t{31};
      *reinterpret_cast<uint2*>(xq_row + block + 8 * j) = make_uint2(
          __byte_perm(q.packed, partner, 0x5140u), __byte_perm(q.packed, partner, 0x7362u));
    }
  } else {
    *reinterpret_cast<uint32_t*>(xq_row + k) = q.packed;
  }
  if ((threadIdx.x & 7) == 0) xd_row[k / 32] = make_float2(q.d, q.d * static_cast<float>(q.sum));
}

// Fused quantization's two outputs (rms_norm_cuda.h, elementwise_cuda.h): `rows` rows of n values
// in natural and in pair order, each area in the kQ8 scratch layout (int8 rows, then the
// {d, d * sum} of each row's blocks at Q8ScalesOffset).
struct Q8Rows {
  int8_t* natural;
  float2* natural_d;
  int8_t* pair;
  float2* pair_d;
  int64_t n;  // values per row
};

inline Q8Rows MakeQ8Rows(void* natural, void* pair, int64_t n, int64_t rows) {
  const int64_t scales = gemv_internal::Q8ScalesOffset(n, rows);
  auto* nat = static_cast<uint8_t*>(natural);
  auto* par = static_cast<uint8_t*>(pair);
  return Q8Rows{reinterpret_cast<int8_t*>(nat), reinterpret_cast<float2*>(nat + scales),
                reinterpret_cast<int8_t*>(par), reinterpret_cast<float2*>(par + scales), n};
}

// The 4 values at column col of row r quantized and stored in both orders. Every thread of the
// 8-thread group holding the 32-value block must call it.
__device__ __forceinline__ void StoreQ8Both(const Q8Rows& q, int64_t r, int64_t col, float4 v) {
  const unsigned mask = 0xFFu << (threadIdx.x & 24);
  const Q8Four four = QuantizeQ8Four(v, mask);
  const int64_t blocks = q.n / 32;
  StoreQ8Four(four, col, q.natural + r * q.n, q.natural_d + r * blocks, false, mask);
  StoreQ8Four(four, col, q.pair + r * q.n, q.pair_d + r * blocks, true, mask);
}

}  // namespace stepserve::kernels::q8_quantize

#endif  // STEPSERVE_KERNELS_MATMUL_Q8_QUANTIZE_CUH_
