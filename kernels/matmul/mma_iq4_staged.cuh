// The staged tensor-core tile of IQ4_XS weights x int8 activations of the prefill's grouped GEMM
// (gemm_grouped_mma_cuda.cu): one stage holds a pair of IQ4_XS blocks (512 weights) of
// kWeightRows weight rows (16 per warp) and the same 512 int8 activations and 16 scales of
// kActRows activation rows, copied by all of the CTA's threads with cp.async; each warp decodes
// its 16 rows' A fragments once per 32-weight sub-block and multiplies them with every 8-row tile
// of activations, whose B fragments and scales come from the stage. Row strides are padded so
// the 8 rows one fragment load reads fall in distinct banks. Session 42's tall GEMV of 8-16
// decode rows shared it (64 rows per CTA, K split over thread-block clusters) and lost to the
// 16-row kernel on the H100 (docs/cuda-engine.md); it was removed, this tile stayed.
// Included inside the anonymous namespace of that .cu file, after gemv_q8x_pieces.cuh
// (Lookup16Pairs) and mma_iq4_util.cuh (Iq4SubScales, MmaS8Scaled).
#ifndef STEPSERVE_KERNELS_MATMUL_MMA_IQ4_STAGED_CUH_
#define STEPSERVE_KERNELS_MATMUL_MMA_IQ4_STAGED_CUH_

// Staged activation row: a pair of blocks (512 int8) + 16 bytes, so rows are 4 banks apart.
constexpr int kStagedActStride = 512 + 16;
// Staged scales: 16 float2 {d, d * sum} per row + 16 bytes, so rows 2t are 8 banks apart.
constexpr int kStagedScaleStride = 16 * 8 + 16;

// Byte layout of one stage: the weight rows (row r at r * kIq4PairBytes), then the activation
// rows, then their scales.
template <int kWeightRows, int kActRows>
struct StagedPair {
  static constexpr int kWeightBytes = kWeightRows * kIq4PairBytes;
  static constexpr int kActBytes = kActRows * kStagedActStride;
  static constexpr int kScaleBytes = kActRows * kStagedScaleStride;
  static constexpr int kBytes = kWeightBytes + kActBytes + kScaleBytes;

  // The CTA's threads: a warp per 16 weight rows.
  static constexpr int kThreads = 2 * kWeightRows;

  // Pair `kp` of weight rows o0 .. o0 + kWeightRows - 1 of matrix w (rows past p.out repeat the
  // last one: computed, dropped). A last pair of one block (kFull false) copies 9 pieces (the 9th
  // ends at the padded row end). Two threads a row, each every other 16-byte piece from one row
  // pointer: ~3 instructions a piece (the flat piece index split by a division took ~22).
  template <bool kFull>
  static __device__ __forceinline__ void CopyWeights(uint8_t* stage, const GemvParams& p,
                                                     const uint8_t* w, int64_t o0, int64_t kp) {
    constexpr int kPieces = kFull ? 17 : 9;
    const int r = static_cast<int>(threadIdx.x) >> 1, odd = static_cast<int>(threadIdx.x) & 1;
    const int64_t row = o0 + r < p.out ? o0 + r : p.out - 1;
    const uint8_t* src = w + row * p.w_row_bytes + kp * kIq4PairBytes + 16 * odd;
    uint8_t* dst = stage + r * kIq4PairBytes + 16 * odd;
#pragma unroll
    for (int m = 0; m < (kPieces + 1) / 2; ++m) {
      if (2 * m + odd < kPieces) CopyAsync16(dst + 32 * m, src + 32 * m);
    }
  }

  // Pair `kp` of the activation rows row_of(0 .. kActRows - 1) in xq / xd: 512 int8 (256 for a
  // last pair of one block) and their 16 (8) scales; kThreads / kActRows threads a row.
  template <bool kFull, class RowOf>
  static __device__ __forceinline__ void CopyActivations(uint8_t* stage, const GemvParams& p,
                                                         int64_t kp, RowOf row_of) {
    constexpr int kXPieces = kFull ? 32 : 16;
    constexpr int kSPieces = kXPieces / 4;  // 16-byte pieces of 2 float2: 8 for 16 sub-blocks
    constexpr int kRowThreads = kThreads / kActRows;
    static_assert(kThreads % kActRows == 0 && kXPieces % kRowThreads == 0, "pieces per thread");
    uint8_t* act = stage + kWeightBytes;
    {
      const int r = static_cast<int>(threadIdx.x) / kRowThreads;
      const int c0 = static_cast<int>(threadIdx.x) % kRowThreads;
      const int8_t* src = p.xq + static_cast<int64_t>(row_of(r)) * p.in + kp * 512 + 16 * c0;
      uint8_t* dst = act + r * kStagedActStride + 16 * c0;
#pragma unroll
      for (int m = 0; m < kXPieces / kRowThreads; ++m) {
        CopyAsync16(dst + 16 * kRowThreads * m, src + 16 * kRowThreads * m);
      }
    }
    uint8_t* scales = act + kActBytes;
    const int64_t blocks32 = p.in / 32;
#pragma unroll
    for (int i = threadIdx.x; i < kActRows * kSPieces; i += kThreads) {
      const int r = i / kSPieces, c = i - r * kSPieces;
      CopyAsync16(scales + r * kStagedScaleStride + 16 * c,
                  p.xd + static_cast<int64_t>(row_of(r)) * blocks32 + kp * 16 + 2 * c);
    }
  }

  // Both, for pair kp (full_pair: both of its blocks exist).
  template <class RowOf>
  static __device__ __forceinline__ void CopyPair(uint8_t* stage, const GemvParams& p,
                                                  const uint8_t* w, int64_t o0, int64_t kp,
                                                  bool full_pair, RowOf row_of) {
    if (full_pair) {
      CopyWeights<true>(stage, p, w, o0, kp);
      CopyActivations<true>(stage, p, kp, row_of);
    } else {
      CopyWeights<false>(stage, p, w, o0, kp);
      CopyActivations<false>(stage, p, kp, row_of);
    }
  }

  // Block bi (0 or 1) of a staged pair: weight rows 16 * warp .. + 15 x the first 8 * kColTiles
  // activation rows, into acc (lane g = lane / 4, t = lane % 4: rows g and g + 8, activation
  // columns 8j + 2t and 8j + 2t + 1).
  template <int kColTiles>
  static __device__ __forceinline__ void MmaBlock(const uint8_t* stage, int bi, int warp, int g,
                                                  int t, const uint32_t (&tbl)[4],
                                                  float (&acc)[kColTiles][4]) {
    static_assert(8 * kColTiles <= kActRows, "the tiles read staged activation rows");
    const uint8_t* ra = stage + (16 * warp + g) * kIq4PairBytes + bi * kIq4Bytes;
    const uint8_t* rb = ra + 8 * kIq4PairBytes;
    const uint8_t* act = stage + kWeightBytes + bi * 256 + 8 * t;
    const uint8_t* scales = stage + kWeightBytes + kActBytes;
    const Iq4SubScales sa(*reinterpret_cast<const uint2*>(ra));
    const Iq4SubScales sb(*reinterpret_cast<const uint2*>(rb));
    // Fully unrolled: shared memory, not registers, bounds the CTAs per SM, so the loads of all
    // 8 sub-blocks may be issued ahead.
#pragma unroll
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t qa = *reinterpret_cast<const uint32_t*>(ra + 8 + 16 * ib + 4 * t);
      const uint32_t qb = *reinterpret_cast<const uint32_t*>(rb + 8 + 16 * ib + 4 * t);
      const float dl_a = sa.Of(ib), dl_b = sb.Of(ib);
      const uint2 va = Lookup16Pairs(qa, tbl), vb = Lookup16Pairs(qb, tbl);
      const uint32_t a[4] = {va.x, vb.x, va.y, vb.y};
      const int sub = 8 * bi + ib;  // 32-value activation block within the staged pair
#pragma unroll
      for (int j = 0; j < kColTiles; ++j) {
        // B column g = staged row 8j + g (the activations are stored in pair order, so the 8
        // bytes at 8t of its sub-block are the fragment); results in columns 2t, 2t + 1.
        const uint2 x =
            *reinterpret_cast<const uint2*>(act + (8 * j + g) * kStagedActStride + 32 * ib);
        const float d0 =
            reinterpret_cast<const float2*>(scales + (8 * j + 2 * t) * kStagedScaleStride)[sub].x;
        const float d1 =
            reinterpret_cast<const float2*>(scales + (8 * j + 2 * t + 1) * kStagedScaleStride)[sub]
                .x;
        MmaS8Scaled(a, x.x, x.y, dl_a, dl_b, d0, d1, acc[j]);
      }
    }
  }
};

#endif  // STEPSERVE_KERNELS_MATMUL_MMA_IQ4_STAGED_CUH_
