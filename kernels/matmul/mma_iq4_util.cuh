// Device helpers shared by the tensor-core IQ4_XS kernels (gemv_mma_cuda.cu, the GEMV for 2-16
// activation rows; gemm_grouped_mma_cuda.cu, the grouped GEMM of a prefill's experts): the int8
// MMA, the IQ4_XS block layout and sub-block scale (cp.async: kernels/common/cp_async.cuh).
#ifndef STEPSERVE_KERNELS_MATMUL_MMA_IQ4_UTIL_CUH_
#define STEPSERVE_KERNELS_MATMUL_MMA_IQ4_UTIL_CUH_

#include <cstdint>

#include "kernels/common/cp_async.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/matmul/gemv_block_util.cuh"
#include "kernels/matmul/gemv_cuda_internal.h"

namespace stepserve::kernels::gemv_internal {

inline constexpr int kIq4Bytes =
    136;  // IQ4_XS block: d (f16), scales_h (u16), scales_l[4], qs[128]
// Two blocks: 17 pieces of 16 bytes, 16-byte aligned in a row (rows are padded to 16 bytes), which
// is why the tensor-core kernels stage blocks in pairs.
inline constexpr int kIq4PairBytes = 2 * kIq4Bytes;

// c = A (16 x 32 int8, row-major fragments) * B (32 x 8 int8), int32, fresh accumulators.
__device__ __forceinline__ void MmaS8(const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                      int (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %10, %10, %10};"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}

// d * (6-bit scale - 32) of sub-block ib from an IQ4_XS block header {d | scales_h, scales_l}.
__device__ __forceinline__ float SubBlockScale(uint2 h, float d, int ib) {
  const uint32_t ls =
      ((Byte(h.y, ib >> 1) >> (4 * (ib & 1))) & 15) | (((h.x >> (16 + 2 * ib)) & 3) << 4);
  return d * static_cast<float>(static_cast<int>(ls) - 32);
}

// Grouped mode, the CTA of slot blockIdx.y owning output rows [o0, o0 + kRows): waits for the
// kernels writing the slot arrays and activations (grouping, quantizer), then yields the slot's
// matrix and group range. False when there is nothing to multiply: an unused slot, or ids outside
// [0, n_matrices), whose output rows it zeroes (as the indexed mode writes them).
template <int kRows>
__device__ __forceinline__ bool SlotGroups(const GemvParams& p, int64_t o0, const uint8_t** w,
                                           int* begin, int* end) {
  const int slot = static_cast<int>(blockIdx.y);
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int32_t id = p.slot_matrix[slot];
  if (id == kSlotUnused) return false;
  *begin = p.slot_begin[slot];
  *end = p.slot_begin[slot + 1];
  if (id < 0) {
    for (int i = threadIdx.x; i < (*end - *begin) * kRows; i += blockDim.x) {
      const int64_t o = o0 + i % kRows;
      if (o < p.out) p.y[p.group_order[*begin + i / kRows] * p.y_stride + o] = 0.f;
    }
    return false;
  }
  *w = p.w + id * p.w_matrix_bytes;
  return true;
}

}  // namespace stepserve::kernels::gemv_internal

#endif  // STEPSERVE_KERNELS_MATMUL_MMA_IQ4_UTIL_CUH_
