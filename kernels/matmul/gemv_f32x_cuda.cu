// Exact F32-activation GEMV kernels (GemvCudaActivations::kF32, the reference mode; see
// matmul_cuda.h). Each weight is dequantized in registers and multiplied by the F32 activation:
//  - one warp per output row; the lanes of a warp split each block into fixed pieces (Q4_K: eight
//    16-byte pieces of qs, IQ4_XS: its eight sub-blocks, Q8_0: quarters, Q6_K: sixteenths) so a
//    warp's loads cover a contiguous stretch of the row (coalesced);
//  - weights are read with streaming (evict-first) loads; activations as float4 through the
//    read-only path;
//  - reduced across the warp with shuffles.
// Measured on the H200 this path is bound by L1 traffic (a 4-byte activation read per weight per
// output row; docs/cuda-host.md), which is why the int8 path exists. The activation-row bound is
// 1 or 16 (compile time, so accumulators stay in registers): this path is kept for exactness, not
// speed, and fewer instantiations keep CI's nvcc time down.
#include <cstdint>

#include "kernels/common/pdl.cuh"
#include "kernels/matmul/gemv_block_util.cuh"
#include "kernels/matmul/gemv_cuda_internal.h"

namespace stepserve::kernels::gemv_internal {
namespace {

// 4 bytes at a 2-byte-aligned address, from the aligned words that hold them (never a word
// without a wanted byte, so rows padded to 16 bytes are never overrun).
__device__ __forceinline__ uint32_t Load32Align2(const uint8_t* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uint32_t off = static_cast<uint32_t>(a & 3u);
  const unsigned* word = reinterpret_cast<const unsigned*>(a - off);
  const unsigned w0 = __ldcs(word);
  const unsigned w1 = off ? __ldcs(word + 1) : 0u;
  return __funnelshift_r(w0, w1, 8 * off);
}

__device__ __forceinline__ float4 LoadX(const float* p) {
  return __ldg(reinterpret_cast<const float4*>(p));
}

// Q8_0: 34-byte blocks, 4 lanes per block (8 int8 each), 8 blocks per warp step.
template <int R>
__device__ __forceinline__ void RowQ8_0(const GemvParams& p, const uint8_t* row, int lane,
                                        float (&acc)[R]) {
  const int64_t nb = p.in / 32;
  const int g = lane >> 2, quarter = lane & 3;
#pragma unroll 2
  for (int64_t b = g; b < nb; b += 8) {
    const uint8_t* blk = row + b * 34;
    const float d = F16Bits(__ldcs(reinterpret_cast<const unsigned short*>(blk)));
    const uint32_t q0 = Load32Align2(blk + 2 + 8 * quarter);
    const uint32_t q1 = Load32Align2(blk + 6 + 8 * quarter);
    const int64_t e = b * 32 + 8 * quarter;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < p.rows) {
        const float4 a = LoadX(p.x + r * p.x_stride + e);
        const float4 c = LoadX(p.x + r * p.x_stride + e + 4);
        float s = static_cast<int8_t>(Byte(q0, 0)) * a.x;
        s += static_cast<int8_t>(Byte(q0, 1)) * a.y;
        s += static_cast<int8_t>(Byte(q0, 2)) * a.z;
        s += static_cast<int8_t>(Byte(q0, 3)) * a.w;
        s += static_cast<int8_t>(Byte(q1, 0)) * c.x;
        s += static_cast<int8_t>(Byte(q1, 1)) * c.y;
        s += static_cast<int8_t>(Byte(q1, 2)) * c.z;
        s += static_cast<int8_t>(Byte(q1, 3)) * c.w;
        acc[r] += d * s;
      }
    }
  }
}

// Σ nibble(word i, low or high) * x over 16 elements; also Σ x (for the min term).
__device__ __forceinline__ void DotNibbles16(uint4 q, bool high, const float* x, float* sqx,
                                             float* sx) {
  const uint32_t words[4] = {q.x, q.y, q.z, q.w};
  float a = 0.f, s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 v = LoadX(x + 4 * i);
    const uint32_t w = high ? (words[i] >> 4) & 0x0F0F0F0Fu : words[i] & 0x0F0F0F0Fu;
    a += Byte(w, 0) * v.x + Byte(w, 1) * v.y + Byte(w, 2) * v.z + Byte(w, 3) * v.w;
    s += (v.x + v.y) + (v.z + v.w);
  }
  *sqx = a;
  *sx = s;
}

// Q4_K: 144-byte blocks (16-byte aligned), 8 lanes per block, each one 16-byte piece of qs
// holding 16 elements of sub-block 2p (low nibbles) and 16 of sub-block 2p+1 (high nibbles).
template <int R>
__device__ __forceinline__ void RowQ4_K(const GemvParams& p, const uint8_t* row, int lane,
                                        float (&acc)[R]) {
  const int64_t nb = p.in / 256;
  const int g = lane >> 3, c = lane & 7, pair = c >> 1;
#pragma unroll 2
  for (int64_t b = g; b < nb; b += 4) {
    const uint4* blk = reinterpret_cast<const uint4*>(row + b * 144);
    const uint4 h = __ldcs(blk);
    const uint4 q = __ldcs(blk + 1 + c);
    uint32_t sc0, m0, sc1, m1;
    ScaleMinK4(h, 2 * pair, &sc0, &m0);
    ScaleMinK4(h, 2 * pair + 1, &sc1, &m1);
    const float d = F16Bits(h.x), dmin = F16Bits(h.x >> 16);
    const float dl0 = d * sc0, ml0 = dmin * m0, dl1 = d * sc1, ml1 = dmin * m1;
    const int64_t e = b * 256 + 64 * pair + 16 * (c & 1);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < p.rows) {
        const float* x = p.x + r * p.x_stride + e;
        float qx0, x0, qx1, x1;
        DotNibbles16(q, false, x, &qx0, &x0);
        DotNibbles16(q, true, x + 32, &qx1, &x1);
        acc[r] += (dl0 * qx0 - ml0 * x0) + (dl1 * qx1 - ml1 * x1);
      }
    }
  }
}

// IQ4_XS: 136-byte blocks (8-byte aligned), 8 lanes per block, one 32-element sub-block each.
template <int R>
__device__ __forceinline__ void RowIQ4_XS(const GemvParams& p, const uint8_t* row, int lane,
                                          float (&acc)[R], const float* kv) {
  const int64_t nb = p.in / 256;
  const int g = lane >> 3, ib = lane & 7;
#pragma unroll 2
  for (int64_t b = g; b < nb; b += 4) {
    const uint8_t* blk = row + b * 136;
    const uint2 h = __ldcs(reinterpret_cast<const uint2*>(blk));
    const uint2 qa = __ldcs(reinterpret_cast<const uint2*>(blk + 8 + 16 * ib));
    const uint2 qb = __ldcs(reinterpret_cast<const uint2*>(blk + 16 + 16 * ib));
    const uint32_t ls = Iq4XsSubScale(h, ib);
    const float dl = F16Bits(h.x) * (static_cast<int>(ls) - 32);
    const uint32_t words[4] = {qa.x, qa.y, qb.x, qb.y};
    float w_lo[16], w_hi[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t byte = Byte(words[i >> 2], i & 3);
      w_lo[i] = kv[byte & 15];
      w_hi[i] = kv[byte >> 4];
    }
    const int64_t e = b * 256 + 32 * ib;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < p.rows) {
        const float* x = p.x + r * p.x_stride + e;
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float4 v = LoadX(x + 4 * i);
          const float4 u = LoadX(x + 16 + 4 * i);
          s += w_lo[4 * i] * v.x + w_lo[4 * i + 1] * v.y + w_lo[4 * i + 2] * v.z +
               w_lo[4 * i + 3] * v.w;
          s += w_hi[4 * i] * u.x + w_hi[4 * i + 1] * u.y + w_hi[4 * i + 2] * u.z +
               w_hi[4 * i + 3] * u.w;
        }
        acc[r] += dl * s;
      }
    }
  }
}

// Q6_K: 210-byte blocks (2-byte aligned), 16 lanes per block. Lane c takes half h = c / 8 and
// positions l = 4*(c%8) .. +3 of all four 32-element quarters k (16 elements).
template <int R>
__device__ __forceinline__ void RowQ6_K(const GemvParams& p, const uint8_t* row, int lane,
                                        float (&acc)[R]) {
  const int64_t nb = p.in / 256;
  const int g = lane >> 4, c = lane & 15, h = c >> 3, l0 = 4 * (c & 7);
  const int sel = l0 >= 16 ? 1 : 0;
#pragma unroll 2
  for (int64_t b = g; b < nb; b += 2) {
    const uint8_t* blk = row + b * 210;
    const uint32_t ql0 = Load32Align2(blk + 64 * h + l0);
    const uint32_t ql1 = Load32Align2(blk + 64 * h + 32 + l0);
    const uint32_t qh = Load32Align2(blk + 128 + 32 * h + l0);
    const uint32_t s03 = Load32Align2(blk + 192 + 8 * h);
    const uint32_t s47 = Load32Align2(blk + 196 + 8 * h);
    const float d = F16Bits(__ldcs(reinterpret_cast<const unsigned short*>(blk + 208)));
    float dsc[4];
    float wq[4][4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int sb = sel + 2 * k;  // scale byte within the 8 of this half
      const uint32_t sbyte = sb < 4 ? Byte(s03, sb & 3) : Byte(s47, sb & 3);
      dsc[k] = d * static_cast<float>(static_cast<int8_t>(sbyte));
      const uint32_t lw = (k & 1) ? ql1 : ql0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t lb = Byte(lw, i);
        const uint32_t lo = k < 2 ? (lb & 15) : (lb >> 4);
        const uint32_t hi = (Byte(qh, i) >> (2 * k)) & 3;
        wq[k][i] = static_cast<float>(static_cast<int>(lo | (hi << 4)) - 32);
      }
    }
    const int64_t e = b * 256 + 128 * h + l0;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < p.rows) {
        const float* x = p.x + r * p.x_stride + e;
        float t = 0.f;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float4 v = LoadX(x + 32 * k);
          t += dsc[k] * (wq[k][0] * v.x + wq[k][1] * v.y + wq[k][2] * v.z + wq[k][3] * v.w);
        }
        acc[r] += t;
      }
    }
  }
}

template <GgmlType kType, int R>
__global__ void __launch_bounds__(kThreads) GemvKernel(const __grid_constant__ GemvParams p) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  __shared__ float kv[16];
  if (kType == GgmlType::kIQ4_XS) {
    if (threadIdx.x < 16) {
      kv[threadIdx.x] =
          static_cast<int8_t>((p.iq4nl[threadIdx.x >> 2] >> (8 * (threadIdx.x & 3))) & 0xFF);
    }
    __syncthreads();
  }
  const int lane = threadIdx.x & 31;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (o >= p.out) return;
  const uint8_t* row = p.w + o * p.w_row_bytes;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
  if constexpr (kType == GgmlType::kQ8_0) RowQ8_0<R>(p, row, lane, acc);
  if constexpr (kType == GgmlType::kQ4_K) RowQ4_K<R>(p, row, lane, acc);
  if constexpr (kType == GgmlType::kIQ4_XS) RowIQ4_XS<R>(p, row, lane, acc, kv);
  if constexpr (kType == GgmlType::kQ6_K) RowQ6_K<R>(p, row, lane, acc);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r < p.rows) {
      float v = acc[r];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
      if (lane == 0) p.y[r * p.y_stride + o] = v;
    }
  }
}

template <GgmlType kType>
cudaError_t LaunchType(const GemvParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.out + kWarpsPerBlock - 1) / kWarpsPerBlock));
  if (p.rows == 1) {
    LaunchWithPdl(GemvKernel<kType, 1>, grid, kThreads, 0, stream, p);
  } else {
    LaunchWithPdl(GemvKernel<kType, 16>, grid, kThreads, 0, stream, p);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchGemvF32x(GgmlType type, const GemvParams& p, cudaStream_t stream) {
  switch (type) {
    case GgmlType::kQ8_0:
      return LaunchType<GgmlType::kQ8_0>(p, stream);
    case GgmlType::kQ4_K:
      return LaunchType<GgmlType::kQ4_K>(p, stream);
    case GgmlType::kQ6_K:
      return LaunchType<GgmlType::kQ6_K>(p, stream);
    case GgmlType::kIQ4_XS:
      return LaunchType<GgmlType::kIQ4_XS>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace stepserve::kernels::gemv_internal
