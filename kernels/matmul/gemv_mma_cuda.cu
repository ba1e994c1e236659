// Tensor-core int8 GEMV for several activation rows (IQ4_XS weights, GemvCudaActivations::kQ8).
//
// Why: the dp4a GEMV (gemv_q8x_cuda.cu) decodes each weight once but then spends ~8 dp4a plus a
// scale multiply per 32 weights for every activation row, so 16 rows cost 3.5x one row (H200,
// bench_model profile). `mma.sync.m16n8k32.s8` does 16 weight rows x 32 weights x 8 activation
// rows in one instruction per warp: after the shared decode, each further 8 activation rows cost
// one MMA and a 4-value scale epilogue per 512 weights.
//
// Layout. A CTA owns 16 output rows (the MMA's M) and its 8 warps split K: warp w takes
// sub-block w (32 weights) of every 256-weight IQ4_XS block of those rows, so its scale bits sit
// at a warp-uniform place. Lane (g = lane / 4, t = lane % 4) loads qs word t of that sub-block
// for rows g and g + 8; Lookup16Pairs turns each word into the 8 table values in pair order,
// which are the MMA's A registers as they come (a0 / a2 for row g, a1 / a3 for row g + 8: k-slots
// 4t..4t+3 and 16+4t..16+4t+3). The activations are stored in the same pair order
// (Q8ScratchPosition), so the B registers of activation row 8j + g are the 8 bytes at 8t of its
// sub-block. Each MMA's int32 result (row, activation row) is that sub-block's exact integer dot;
// it is scaled by the weight sub-block scale and the activation block's d in F32. The 8 warps'
// partial sums are added through shared memory at the end.
//
// Weights are read with plain (L1-allocating) loads: the 4 lanes of a row read 16 bytes of a
// 32-byte sector and the next sub-block's warp reads the other half. A ring of kDepth sub-blocks
// per warp keeps loads in flight; the first kDepth are issued before waiting for the quantizer
// (programmatic dependent launch), since weights do not depend on it.
#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "kernels/common/pdl.cuh"
#include "kernels/matmul/gemv_block_util.cuh"
#include "kernels/matmul/gemv_cuda_internal.h"

namespace stepserve::kernels::gemv_internal {
namespace {

#include "kernels/matmul/gemv_q8x_pieces.cuh"

constexpr int kMmaWarps = 8;    // split-K: one per IQ4_XS sub-block
constexpr int kMmaRowsM = 16;   // output rows per CTA
constexpr int kMmaDepth = 8;    // sub-blocks in flight per warp
constexpr int kIq4Bytes = 136;  // IQ4_XS block: d (f16), scales_h (u16), scales_l[4], qs[128]

// c = A (16 x 32 int8, row-major fragments) * B (32 x 8 int8), int32, fresh accumulators.
__device__ __forceinline__ void MmaS8(const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                      int (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %10, %10, %10};"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}

// One sub-block of rows g and g + 8: the qs word of the lane and the block headers.
struct Stage {
  uint32_t qa, qb;
  uint2 ha, hb;
};

__device__ __forceinline__ Stage LoadStage(const uint8_t* wa, const uint8_t* wb, int64_t b,
                                           int word_at) {
  const int64_t at = b * kIq4Bytes;
  Stage s;
  s.ha = *reinterpret_cast<const uint2*>(wa + at);
  s.hb = *reinterpret_cast<const uint2*>(wb + at);
  s.qa = *reinterpret_cast<const uint32_t*>(wa + at + word_at);
  s.qb = *reinterpret_cast<const uint32_t*>(wb + at + word_at);
  return s;
}

// d * (6-bit scale - 32) of sub-block ib from an IQ4_XS block header {d | scales_h, scales_l}.
__device__ __forceinline__ float SubBlockScale(uint2 h, int ib) {
  const uint32_t ls =
      ((Byte(h.y, ib >> 1) >> (4 * (ib & 1))) & 15) | (((h.x >> (16 + 2 * ib)) & 3) << 4);
  return F16Bits(h.x) * static_cast<float>(static_cast<int>(ls) - 32);
}

// NT = activation-row tiles of 8 (rows <= 8 * NT).
template <int NT>
__global__ void __launch_bounds__(32 * kMmaWarps)
    GemvMmaIq4XsKernel(const __grid_constant__ GemvParams p) {
  __shared__ float4 partial[kMmaWarps][NT][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kMmaRowsM;
  const int64_t row_a = o0 + g < p.out ? o0 + g : p.out - 1;
  const int64_t row_b = o0 + g + 8 < p.out ? o0 + g + 8 : p.out - 1;
  const uint8_t* wa = p.w + row_a * p.w_row_bytes;
  const uint8_t* wb = p.w + row_b * p.w_row_bytes;
  const int ib = warp;
  const int word_at = 8 + 16 * ib + 4 * t;
  const int64_t nb = p.in / 256;

  Stage ring[kMmaDepth];
#pragma unroll
  for (int k = 0; k < kMmaDepth; ++k) {
    if (k < nb) ring[k] = LoadStage(wa, wb, k, word_at);
  }
  WaitForPrimaryGrid();  // the quantizer writing xq / xd may still run
  AllowDependentLaunch();

  const uint32_t tbl[4] = {p.iq4nl[0], p.iq4nl[1], p.iq4nl[2], p.iq4nl[3]};
  const int64_t blocks32 = p.in / 32;
  // Activation rows this lane feeds (B column g) and whose results it holds (columns 2t, 2t+1),
  // clamped to the last row: the extra columns are computed and dropped.
  int x_row[NT], d_row0[NT], d_row1[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int last = p.rows - 1;
    x_row[j] = 8 * j + g < last ? 8 * j + g : last;
    d_row0[j] = 8 * j + 2 * t < last ? 8 * j + 2 * t : last;
    d_row1[j] = 8 * j + 2 * t + 1 < last ? 8 * j + 2 * t + 1 : last;
  }
  float acc[NT][4] = {};
  for (int64_t b0 = 0; b0 < nb; b0 += kMmaDepth) {
#pragma unroll
    for (int k = 0; k < kMmaDepth; ++k) {
      const int64_t b = b0 + k;
      if (b < nb) {
        const Stage s = ring[k];
        if (b + kMmaDepth < nb) ring[k] = LoadStage(wa, wb, b + kMmaDepth, word_at);
        const float dl_a = SubBlockScale(s.ha, ib), dl_b = SubBlockScale(s.hb, ib);
        const uint2 va = Lookup16Pairs(s.qa, tbl), vb = Lookup16Pairs(s.qb, tbl);
        const uint32_t a[4] = {va.x, vb.x, va.y, vb.y};
        const int64_t sub = 8 * b + ib;  // 32-value activation block
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          if (8 * j < p.rows) {
            const uint2 x =
                __ldg(reinterpret_cast<const uint2*>(p.xq + x_row[j] * p.in + 32 * sub + 8 * t));
            const float d0 = __ldg(&p.xd[d_row0[j] * blocks32 + sub].x);
            const float d1 = __ldg(&p.xd[d_row1[j] * blocks32 + sub].x);
            int c[4];
            MmaS8(a, x.x, x.y, c);
            acc[j][0] += IntToFloat(c[0]) * (dl_a * d0);
            acc[j][1] += IntToFloat(c[1]) * (dl_a * d1);
            acc[j][2] += IntToFloat(c[2]) * (dl_b * d0);
            acc[j][3] += IntToFloat(c[3]) * (dl_b * d1);
          }
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    partial[warp][j][lane] = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < NT * 32; i += blockDim.x) {
    const int j = i / 32, l = i % 32;
    float4 v = partial[0][j][l];
#pragma unroll
    for (int w = 1; w < kMmaWarps; ++w) {
      const float4 u = partial[w][j][l];
      v.x += u.x;
      v.y += u.y;
      v.z += u.z;
      v.w += u.w;
    }
    const int lg = l >> 2, lt = l & 3;
    const int r0 = 8 * j + 2 * lt, r1 = r0 + 1;  // activation (output) rows of the columns
    const int64_t oa = o0 + lg, ob = o0 + lg + 8;
    if (oa < p.out) {
      if (r0 < p.rows) p.y[r0 * p.y_stride + oa] = v.x;
      if (r1 < p.rows) p.y[r1 * p.y_stride + oa] = v.y;
    }
    if (ob < p.out) {
      if (r0 < p.rows) p.y[r0 * p.y_stride + ob] = v.z;
      if (r1 < p.rows) p.y[r1 * p.y_stride + ob] = v.w;
    }
  }
}

bool MmaFromEnv() {
  const char* v = std::getenv("STEPSERVE_GEMV_MMA");
  return v == nullptr || v[0] != '0';
}

}  // namespace

bool GemvMmaEnabled() {
  static const bool enabled = MmaFromEnv();
  return enabled;
}

cudaError_t LaunchGemvQ8xMma(GgmlType type, const GemvParams& p, bool overlap_previous,
                             cudaStream_t stream) {
  if (type != GgmlType::kIQ4_XS || !p.x_pair_order || p.rows < 2 || p.rows > kGemvMmaMaxRows ||
      p.in % 256 != 0 || p.matrix_ids != nullptr || p.slot_matrix != nullptr || !GemvMmaEnabled()) {
    return cudaErrorNotSupported;
  }
  const dim3 grid(static_cast<unsigned>((p.out + kMmaRowsM - 1) / kMmaRowsM));
  const dim3 block(32 * kMmaWarps);
  const bool overlap = overlap_previous || PdlEnabled();
  static_assert(kGemvMmaMaxRows == 16, "one instantiation per 8 activation rows");
  return p.rows <= 8 ? LaunchOverlapping(overlap, GemvMmaIq4XsKernel<1>, grid, block, 0, stream, p)
                     : LaunchOverlapping(overlap, GemvMmaIq4XsKernel<2>, grid, block, 0, stream, p);
}

}  // namespace stepserve::kernels::gemv_internal
