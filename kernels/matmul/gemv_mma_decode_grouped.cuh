// GemvMmaIq4XsDecodeGroupedKernel: the tensor-core grouped GEMV for decode batches
// (STEPSERVE_GROUPED_MMA_DECODE, LaunchGemvQ8xMmaDecodeGrouped). Included inside the anonymous
// namespace of gemv_mma_cuda.cu, after its staging constants (kPairBytes, kStages, kStageBytes,
// kMmaRowsM) and mma_iq4_util.cuh.
#ifndef STEPSERVE_KERNELS_MATMUL_GEMV_MMA_DECODE_GROUPED_CUH_
#define STEPSERVE_KERNELS_MATMUL_GEMV_MMA_DECODE_GROUPED_CUH_

// Copies pair `pair` of a 16-row tile into `stage` (row r at r * kPairBytes): lane (r = lane % 16,
// half = lane / 16) copies pieces half, half + 2, ... of row r, so every address is the lane's row
// pointer plus an immediate. kPieces = 17 for a full pair, 9 for a last pair of one block.
template <int kPieces>
__device__ __forceinline__ void CopyTilePair(uint8_t* stage, const uint8_t* lane_row, int64_t pair,
                                             int lane) {
  const int r = lane & 15, half = lane >> 4;
  uint8_t* dst = stage + r * kPairBytes + 16 * half;
  const uint8_t* src = lane_row + pair * kPairBytes + 16 * half;
#pragma unroll
  for (int m = 0; m < (kPieces + 1) / 2; ++m) {
    if (half + 2 * m < kPieces) CopyAsync16(dst + 32 * m, src + 32 * m);
  }
}

// d * (byte k of `bytes` - 32), exact up to the product's rounding (SubBlockScale's value): the
// byte in the mantissa of 2^23, minus 2^23 + 32.
__device__ __forceinline__ float ScaleOfByte(uint32_t bytes, uint32_t k, float d) {
  return d * (__int_as_float(static_cast<int>(__byte_perm(bytes, 0x4B000000u, 0x7440u | k))) -
              8388640.0f);
}

// Block b of the staged pair at `blk` (row r at r * kPairBytes) for one 8-column tile: MmaBlock's
// arithmetic (the same bits), with the lane's activations at xp (its 8 bytes of sub-block 0 of the
// block) and the result columns' scales at d0 / d1 (sub-block 0's), all advanced by the caller.
__device__ __forceinline__ void MmaDecodeBlock(const uint8_t* blk, int g, int t,
                                               const uint32_t (&tbl)[4], const int8_t* xp,
                                               const float2* d0, const float2* d1,
                                               float (&acc)[4]) {
  const uint8_t* ra = blk + g * kPairBytes;
  const uint8_t* rb = ra + 8 * kPairBytes;
  const uint2 ha = *reinterpret_cast<const uint2*>(ra);
  const uint2 hb = *reinterpret_cast<const uint2*>(rb);
  const float da = F16Bits(ha.x), db = F16Bits(hb.x);
  uint32_t even_a, odd_a, even_b, odd_b;
  Iq4ScaleBytes(ha, &even_a, &odd_a);
  Iq4ScaleBytes(hb, &even_b, &odd_b);
#pragma unroll
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t qa = *reinterpret_cast<const uint32_t*>(ra + 8 + 16 * ib + 4 * t);
    const uint32_t qb = *reinterpret_cast<const uint32_t*>(rb + 8 + 16 * ib + 4 * t);
    const float dl_a = ScaleOfByte((ib & 1) ? odd_a : even_a, ib >> 1, da);
    const float dl_b = ScaleOfByte((ib & 1) ? odd_b : even_b, ib >> 1, db);
    const uint2 va = Lookup16Pairs(qa, tbl), vb = Lookup16Pairs(qb, tbl);
    const uint32_t a[4] = {va.x, vb.x, va.y, vb.y};
    const uint2 x = __ldg(reinterpret_cast<const uint2*>(xp + 32 * ib));
    const float x0 = __ldg(&d0[ib].x), x1 = __ldg(&d1[ib].x);
    int c[4];
    MmaS8(a, x.x, x.y, c);
    acc[0] += IntToFloat(c[0]) * (dl_a * x0);
    acc[1] += IntToFloat(c[1]) * (dl_a * x1);
    acc[2] += IntToFloat(c[2]) * (dl_b * x0);
    acc[3] += IntToFloat(c[3]) * (dl_b * x1);
  }
}

// One warp's 16-row tile from o0 of matrix `w` against one 8-column tile (B column g from
// activation row x_row, result columns 2t / 2t + 1 scaled by rows d_row0 / d_row1), the whole K
// loop through the warp's two-stage ring of block pairs, into acc.
__device__ __forceinline__ void DecodeTile(const GemvParams& p, const uint8_t* w, int64_t o0,
                                           uint8_t (*ring)[kStageBytes], int lane, int x_row,
                                           int d_row0, int d_row1, float (&acc)[4]) {
  const int g = lane >> 2, t = lane & 3;
  const int64_t row = o0 + (lane & 15) < p.out ? o0 + (lane & 15) : p.out - 1;
  const uint8_t* lane_row = w + row * p.w_row_bytes;  // rows past `out`: computed, dropped
  const int64_t nb = p.in / 256, pairs = (nb + 1) / 2;
  const auto copy = [&](int stage, int64_t pair) {
    if (2 * pair + 1 < nb) {
      CopyTilePair<17>(ring[stage], lane_row, pair, lane);
    } else {
      CopyTilePair<9>(ring[stage], lane_row, pair, lane);
    }
  };
#pragma unroll
  for (int k = 0; k < kStages; ++k) {
    if (k < pairs) copy(k, k);
    CommitCopies();  // empty groups too: the wait below counts groups
  }
  const uint32_t tbl[4] = {p.iq4nl[0], p.iq4nl[1], p.iq4nl[2], p.iq4nl[3]};
  const int64_t blocks32 = p.in / 32;
  const int8_t* xp = p.xq + x_row * p.in + 8 * t;
  const float2* d0 = p.xd + d_row0 * blocks32;
  const float2* d1 = p.xd + d_row1 * blocks32;
  for (int64_t k = 0; k < pairs; ++k) {
    const int stage = static_cast<int>(k % kStages);
    WaitCopiesButOne();  // this lane's copies of pair k have landed
    __syncwarp();        // and every lane's
    MmaDecodeBlock(ring[stage], g, t, tbl, xp, d0, d1, acc);
    if (2 * k + 1 < nb) {
      MmaDecodeBlock(ring[stage] + kIq4Bytes, g, t, tbl, xp + 256, d0 + 8, d1 + 8, acc);
    }
    xp += 512;
    d0 += 16;
    d1 += 16;
    __syncwarp();  // every lane is done with the stage before it is refilled
    if (k + kStages < pairs) copy(stage, k + kStages);
    CommitCopies();
  }
}

// Grouped mode for decode batches (STEPSERVE_GROUPED_MMA_DECODE; LaunchGemvQ8xMmaDecodeGrouped): a
// slot's groups in chunks of 8 activation rows, one MMA column tile, and no K split - each warp
// takes whole 16-row tiles (tile blockIdx.x * kWarps + warp, then every gridDim.x * kWarps-th)
// with the full K loop through its own two-stage ring (DecodeTile), so its accumulators are final
// and go straight to y (no reduction through shared memory, no CTA barrier). Why: at 16-64 streams
// each expert sees ~0.4-1.8 (token, slot) pairs, and the dp4a grouped GEMV pays the decode and the
// dots per pair: ~3.3 SASS instructions per IQ4_XS weight for one pair, ~4.5 for two (session
// 22); here the dots of up to 8 pairs are one MMA and a 4-value F32 epilogue per 16 weights of a
// lane. The grouped tensor-core kernel above (K split over 4 warps, 32 pairs per chunk, a CTA per
// 16 rows) was built for a prefill's ~60 pairs per expert, and its per-MMA code (MmaBlock through
// WarpK, CopyPair's per-piece division and row clamp) is ~90 SASS instructions per MMA where this
// one's is about half (the copies from a lane row pointer plus immediates, the 8 sub-block scales
// from whole-word bit operations, activation pointers advanced per block).
template <int kWarps>
__global__ void __launch_bounds__(32 * kWarps)
    GemvMmaIq4XsDecodeGroupedKernel(const __grid_constant__ GemvParams p) {
  extern __shared__ __align__(16) uint8_t mma_smem[];
  auto* rings = reinterpret_cast<uint8_t(*)[kStages][kStageBytes]>(mma_smem);
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int g = lane >> 2, t = lane & 3;
  const int64_t tiles = (p.out + kMmaRowsM - 1) / kMmaRowsM;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  const int slot = static_cast<int>(blockIdx.y);
  WaitForPrimaryGrid();  // the grouping kernel and the quantizer may still run
  AllowDependentLaunch();
  const int32_t id = p.slot_matrix[slot];
  if (id == kSlotUnused) return;
  const int begin = p.slot_begin[slot], end = p.slot_begin[slot + 1];
  if (id < 0) {  // ids outside [0, n_matrices): zero rows, as the indexed mode writes
    for (int64_t tile = first; tile < tiles; tile += stride) {
      const int64_t o = tile * kMmaRowsM + (lane & 15);
      for (int i = begin + (lane >> 4); i < end; i += 2) {
        if (o < p.out) p.y[p.group_order[i] * p.y_stride + o] = 0.f;
      }
    }
    return;
  }
  const uint8_t* w = p.w + id * p.w_matrix_bytes;
  for (int c0 = begin; c0 < end; c0 += 8) {
    const int cols = end - c0 < 8 ? end - c0 : 8;
    // B column g's activation row and the rows of result columns 2t, 2t + 1, clamped to the
    // chunk's last column (the extra columns are computed and dropped).
    const auto x_of = [&](int r) { return p.group_order[c0 + (r < cols ? r : cols - 1)]; };
    const int x_row = x_of(g) / p.x_group_div;
    const int d_row0 = x_of(2 * t) / p.x_group_div;
    const int d_row1 = x_of(2 * t + 1) / p.x_group_div;
    for (int64_t tile = first; tile < tiles; tile += stride) {
      const int64_t o0 = tile * kMmaRowsM;
      float acc[1][4] = {};
      DecodeTile(p, w, o0, rings[warp], lane, x_row, d_row0, d_row1, acc[0]);
      StoreGroupedTile<1>(p, o0 + g, c0, cols, t, acc);
    }
  }
}

#endif  // STEPSERVE_KERNELS_MATMUL_GEMV_MMA_DECODE_GROUPED_CUH_
