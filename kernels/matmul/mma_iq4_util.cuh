// Device helpers shared by the tensor-core IQ4_XS kernels (gemv_mma_cuda.cu, the GEMV for 2-16
// activation rows; gemm_grouped_mma_cuda.cu, the grouped GEMM of a prefill's experts): the int8
// MMA and its scaled accumulation, the IQ4_XS block layout and sub-block scales (cp.async:
// kernels/common/cp_async.cuh).
#ifndef STEPSERVE_KERNELS_MATMUL_MMA_IQ4_UTIL_CUH_
#define STEPSERVE_KERNELS_MATMUL_MMA_IQ4_UTIL_CUH_

#include <atomic>
#include <cstdint>

#include "kernels/common/cp_async.cuh"
#include "kernels/common/dynamic_smem.h"
#include "kernels/common/pdl.cuh"
#include "kernels/matmul/gemv_block_util.cuh"
#include "kernels/matmul/gemv_cuda_internal.h"

namespace stepserve::kernels::gemv_internal {

inline constexpr int kIq4Bytes =
    136;  // IQ4_XS block: d (f16), scales_h (u16), scales_l[4], qs[128]
// Two blocks: 17 pieces of 16 bytes, 16-byte aligned in a row (rows are padded to 16 bytes), which
// is why the tensor-core kernels stage blocks in pairs.
inline constexpr int kIq4PairBytes = 2 * kIq4Bytes;

// c = A (16 x 32 int8, row-major fragments) * B (32 x 8 int8) + c0 in every element, int32.
__device__ __forceinline__ void MmaS8(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, int c0,
                                      int (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %10, %10, %10};"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c0));
}

// c += A (16 x 16 F16, row-major fragments) * B (16 x 8 F16), F32 accumulators. Not volatile:
// a pure function of its operands, so the compiler may schedule it among the decode.
__device__ __forceinline__ void MmaF16(const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                       float (&c)[4]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The 6-bit scales of all 8 sub-blocks of an IQ4_XS block header {d | scales_h, scales_l}, one
// per byte: byte k of *even is sub-block 2k's, of *odd sub-block 2k + 1's, assembled with
// whole-word bit operations (a scalar extraction per sub-block costs ~7 instructions).
__device__ __forceinline__ void Iq4ScaleBytes(uint2 h, uint32_t* even, uint32_t* odd) {
  const uint32_t sh = h.x >> 16;
  const uint32_t nib = __byte_perm(sh & 0x0F0Fu, (sh >> 4) & 0x0F0Fu, 0x5140u);
  *even = (h.y & 0x0F0F0F0Fu) | ((nib & 0x03030303u) << 4);
  *odd = ((h.y >> 4) & 0x0F0F0F0Fu) | ((nib & 0x0C0C0C0Cu) << 2);
}

// An IQ4_XS block's sub-block scales d * (ls - 32), unpacked once per block (Iq4ScaleBytes) so
// that each sub-block's costs 3 instructions: a byte select into the mantissa of 2^23, a float
// subtract of 2^23 + 32 (exact: the result is the integer ls - 32) and the multiply by d - the
// same float as d * float(ls - 32), ~7 instructions as a scalar extraction per sub-block.
struct Iq4SubScales {
  uint32_t even, odd;
  float d;
  __device__ __forceinline__ explicit Iq4SubScales(uint2 h) : d(F16Bits(h.x)) {
    Iq4ScaleBytes(h, &even, &odd);
  }
  __device__ __forceinline__ float Of(int ib) const {
    const uint32_t bytes = (ib & 1) ? odd : even;
    const uint32_t sel = 0x7440u | static_cast<uint32_t>(ib >> 1);  // byte ib / 2, then 0, 0, 0x4B
    return d * (__int_as_float(__byte_perm(bytes, 0x4B000000u, sel)) - 8388640.0f);
  }
};

// One sub-block of the tensor-core IQ4_XS kernels: the int8 MMA of the decoded weights `a` (rows
// g and g + 8) with one 8-column activation fragment {b0, b1}, each exact integer dot scaled by
// its weight sub-block scale (dl_g, dl_g8) times its activation block scale (d0 for column 2t,
// d1 for 2t + 1) into acc. The MMA's accumulators start at IntToFloat's integer bias, so each
// result converts with the float subtract alone (4 integer adds fewer per MMA); |dot| <= 32 *
// 127 * 127 < 2^22 keeps the conversion exact and the biased sum below 2^31.
__device__ __forceinline__ void MmaS8Scaled(const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                            float dl_g, float dl_g8, float d0, float d1,
                                            float (&acc)[4]) {
  int c[4];
  MmaS8(a, b0, b1, kIntToFloatBias, c);
  acc[0] += BiasedIntToFloat(c[0]) * (dl_g * d0);
  acc[1] += BiasedIntToFloat(c[1]) * (dl_g * d1);
  acc[2] += BiasedIntToFloat(c[2]) * (dl_g8 * d0);
  acc[3] += BiasedIntToFloat(c[3]) * (dl_g8 * d1);
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

// Grouped mode: the activation rows (in xq / xd or xh) of the chunk's groups c0 .. c0 + cols - 1
// into pair_row[0 .. kTilePairs), the last one repeated past `cols`; then a barrier.
template <int kTilePairs>
__device__ __forceinline__ void LoadPairRows(const GemvParams& p, int c0, int cols, int* pair_row) {
  if (threadIdx.x < kTilePairs) {
    const int r = static_cast<int>(threadIdx.x) < cols ? static_cast<int>(threadIdx.x) : cols - 1;
    pair_row[threadIdx.x] = p.group_order[c0 + r] / p.x_group_div;
  }
  __syncthreads();
}

// Launches a grouped tile kernel: grid (tiles of `tile_rows` output rows, slots), `threads` per
// CTA, `smem` bytes of dynamic shared memory (the attribute set once per device: attribute_set).
inline cudaError_t LaunchGroupedTiles(void (*kernel)(GemvParams), int tile_rows, int threads,
                                      size_t smem, std::atomic<uint64_t>& attribute_set,
                                      const GemvParams& p, int64_t slots, cudaStream_t stream) {
  if (const cudaError_t err = SetDynamicSharedOnce(kernel, smem, attribute_set);
      err != cudaSuccess) {
    return err;
  }
  const dim3 grid(static_cast<unsigned>((p.out + tile_rows - 1) / tile_rows),
                  static_cast<unsigned>(slots));
  return LaunchOverlapping(PdlEnabled(), kernel, grid, dim3(threads), smem, stream, p);
}

// Grouped mode: stores a warp's m16n8 accumulator tiles (rows oa and oa + 8, kColTiles tiles of
// 8 columns: the chunk's columns c0 + 8j + 2t, + 1) into the output rows of their groups, dropping
// columns past `cols` and rows past p.out.
template <int kColTiles>
__device__ __forceinline__ void StoreGroupedTile(const GemvParams& p, int64_t oa, int c0, int cols,
                                                 int t, const float (&acc)[kColTiles][4]) {
  const int64_t ob = oa + 8;
#pragma unroll
  for (int j = 0; j < kColTiles; ++j) {
    const int c_lo = 8 * j + 2 * t, c_hi = c_lo + 1;
    if (c_lo < cols) {
      float* y = p.y + static_cast<int64_t>(p.group_order[c0 + c_lo]) * p.y_stride;
      if (oa < p.out) y[oa] = acc[j][0];
      if (ob < p.out) y[ob] = acc[j][2];
    }
    if (c_hi < cols) {
      float* y = p.y + static_cast<int64_t>(p.group_order[c0 + c_hi]) * p.y_stride;
      if (oa < p.out) y[oa] = acc[j][1];
      if (ob < p.out) y[ob] = acc[j][3];
    }
  }
}

}  // namespace stepserve::kernels::gemv_internal

#endif  // STEPSERVE_KERNELS_MATMUL_MMA_IQ4_UTIL_CUH_
