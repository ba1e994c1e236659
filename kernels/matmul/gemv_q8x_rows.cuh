// Warp-level pieces shared by the int8-activation GEMV kernels (gemv_q8x_cuda.cu: plain,
// indexed, one-row; gemv_q8x_grouped_cuda.cu: grouped): a warp's dot products of NR weight rows
// (or one short row per lane group) with up to R activation rows through the per-type Pieces, the
// warp-reduced stores, the L2 prefetch of a warp's first rows, and the warp-rows launcher.
// Included inside the anonymous namespace of those files, after gemv_q8x_pieces.cuh.
#ifndef STEPSERVE_KERNELS_MATMUL_GEMV_Q8X_ROWS_CUH_
#define STEPSERVE_KERNELS_MATMUL_GEMV_Q8X_ROWS_CUH_

// acc[n][r] += output row o0 + n of matrix `w` dotted with activation row x_rows[r], r < n_rows.
// Per step every lane decodes its piece of one block of each of the NR weight rows, then each
// activation row's int8 piece is loaded once and dotted with all NR. Software pipeline: D steps
// of raw weight words in flight per warp (a register ring indexed only by unrolled constants);
// each step decodes the oldest slot, refills it with the step D ahead (past the row's end, block
// b again: an L1 hit whose data goes unused, which costs less than the ring copies ptxas made of
// a conditional refill - gemv_cuda_internal.h), then does the arithmetic, so HBM latency overlaps
// D - 1 steps of work. Rows past `out` re-read the last row.
// Addressing (sessions 22-23; each piece says where its lane's activations start, XAt / DAt, and
// loads them, LoadXAt): a weight pointer per row and an int8 / scale pointer pair per activation
// row advance by a constant each iteration, their per-step offsets immediates, instead of 64-bit
// products of the block index with the row and block strides at every load (in the SASS of the
// grouped GEMV's two-row chunk, IQ4_XS, ~100 of the loop's 569 instructions per two steps were
// address arithmetic; the index-addressed form was removed in session 24).
// kWaitAfterRing: the caller has not waited for the previous kernel yet; the first ring of weight
// words is loaded before the PDL wait (WeightsBeforeWait), which then happens here.
// kFixedBlocks > 0 (a multiple of an iteration's blocks): the caller guarantees p.in ==
// kFixedBlocks blocks, so every iteration is whole and runs unguarded (STEPSERVE_GROUPED_WHOLE).
template <class P, int R, int NR, int D, bool kWaitAfterRing = false, int kFixedBlocks = 0>
__device__ __forceinline__ void AccumulateRowsPointers(const GemvParams& p, const uint8_t* w,
                                                       int64_t o0, int lane, const int (&x_rows)[R],
                                                       int n_rows, float (&acc)[NR][R]) {
  constexpr int kBlocksPerStep = 32 / P::kLanes;
  constexpr int kStepBytes = kBlocksPerStep * P::kBytes;  // a lane group's weight bytes a step
  constexpr int kStepX = kBlocksPerStep * P::kElems;      // its activations a step
  constexpr int kStepD = kBlocksPerStep * (P::kElems / 32);
  static_assert(kFixedBlocks % (D * kBlocksPerStep) == 0, "whole iterations only");
  const int g = lane / P::kLanes, c = lane % P::kLanes;
  const int nb = kFixedBlocks > 0 ? kFixedBlocks : static_cast<int>(p.in / P::kElems);
  const uint8_t* wp[NR];  // the lane group's block of the current iteration's first step
#pragma unroll
  for (int n = 0; n < NR; ++n) {
    wp[n] = w + (o0 + n < p.out ? o0 + n : p.out - 1) * p.w_row_bytes + g * P::kBytes;
  }
  const int8_t* xp[R];  // the lane's activations of that block, per activation row
  const float2* dp[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    xp[r] = p.xq + x_rows[r] * p.in + g * P::kElems + P::XAt(c);
    dp[r] = p.xd + x_rows[r] * (p.in / 32) + g * (P::kElems / 32) + P::DAt(c);
  }
  typename P::Raw ring[D][NR];
#pragma unroll
  for (int k = 0; k < D; ++k) {
#pragma unroll
    for (int n = 0; n < NR; ++n) {
      if (g + k * kBlocksPerStep < nb) ring[k][n] = P::LoadRaw(wp[n] + k * kStepBytes, c);
    }
  }
  if constexpr (kWaitAfterRing) {
    WaitForPrimaryGrid();
    AllowDependentLaunch();
  }
  if constexpr (kFixedBlocks > 0) {
    // Whole iterations (a fixed block count): every step exists, so no per-step guard; the
    // refills of all but the last iteration are unconditional, the last has none. A copy of the
    // guarded loop's step rather than one body shared through a lambda: that changed the default
    // kernels' SASS (gemv_q8x_cuda.cu's indexed one-row IQ4_XS loop 389 -> 395 instructions).
    constexpr int kIters = kFixedBlocks / (D * kBlocksPerStep);
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
#pragma unroll
      for (int k = 0; k < D; ++k) {
        typename P::W wv[NR];
#pragma unroll
        for (int n = 0; n < NR; ++n) {
          wv[n] = P::Decode(ring[k][n], g + (it * D + k) * kBlocksPerStep, c, p);
          if (it + 1 < kIters) ring[k][n] = P::LoadRaw(wp[n] + (D + k) * kStepBytes, c);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (r < n_rows) {
            const int8_t* step_x = xp[r] + k * kStepX;
            const typename P::X x = P::LoadXAt(step_x, dp[r] + k * kStepD);
#pragma unroll
            for (int n = 0; n < NR; ++n) acc[n][r] += P::Dot(wv[n], x, c);
          }
        }
      }
#pragma unroll
      for (int n = 0; n < NR; ++n) wp[n] += kStepBytes * D;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        xp[r] += kStepX * D;
        dp[r] += kStepD * D;
      }
    }
    return;
  }
  for (int b0 = g; b0 < nb; b0 += D * kBlocksPerStep) {
#pragma unroll
    for (int k = 0; k < D; ++k) {
      const int b = b0 + k * kBlocksPerStep;
      if (b < nb) {
        typename P::W wv[NR];
#pragma unroll
        for (int n = 0; n < NR; ++n) wv[n] = P::Decode(ring[k][n], b, c, p);
        const bool ahead = b + D * kBlocksPerStep < nb;
#pragma unroll
        for (int n = 0; n < NR; ++n) {
          ring[k][n] = P::LoadRaw(wp[n] + (ahead ? k + D : k) * kStepBytes, c);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (r < n_rows) {
            const typename P::X x = P::LoadXAt(xp[r] + k * kStepX, dp[r] + k * kStepD);
#pragma unroll
            for (int n = 0; n < NR; ++n) acc[n][r] += P::Dot(wv[n], x, c);
          }
        }
      }
    }
#pragma unroll
    for (int n = 0; n < NR; ++n) wp[n] += D * kStepBytes;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      xp[r] += D * kStepX;
      dp[r] += D * kStepD;
    }
  }
}

// Warp-reduces acc and stores y[y_rows[r]][o0 + n] for r < n_rows, o0 + n < out.
template <int R, int NR>
__device__ __forceinline__ void StoreRows(const GemvParams& p, float (&acc)[NR][R], int lane,
                                          int64_t o0, const int64_t (&y_rows)[R], int n_rows) {
#pragma unroll
  for (int n = 0; n < NR; ++n) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < n_rows) {
        float v = acc[n][r];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
        if (lane == 0 && o0 + n < p.out) p.y[y_rows[r] * p.y_stride + o0 + n] = v;
      }
    }
  }
}

// Short rows (fewer blocks than two warp steps, e.g. the experts' down projection: 1280 IQ4_XS
// weights = 5 blocks, which AccumulateRowsPointers spreads 4 blocks a step over the lanes, so the
// second step runs with one lane group in four): each lane group instead takes a row of its own, o0
// + g, and walks all of its blocks, so every lane works on every step. acc[r] += that row dotted
// with activation row x_rows[r], r < n_rows.
template <class P>
inline constexpr int kShortRowsPerWarp = 32 / P::kLanes;

template <class P>
__host__ __device__ inline bool IsShortRow(int64_t in) {
  return in / P::kElems < 2 * kShortRowsPerWarp<P>;
}

// acc[r] += the lane group's row o0 + g dotted with activation row x_rows[r], r < n_rows: a ring
// of D blocks per lane group, addressed by advancing pointers as AccumulateRowsPointers (the
// refill stays conditional: unconditional refills made these loops longer in SASS).
// kFixedBlocks > 0: the caller guarantees p.in == kFixedBlocks blocks, so the block guards and
// refill bounds are compile-time constants (with kFixedBlocks == D: one ring, no guard or refill
// left - STEPSERVE_GROUPED_WHOLE).
template <class P, int R, int D, int kFixedBlocks = 0>
__device__ __forceinline__ void AccumulateShortRowsPointers(const GemvParams& p, const uint8_t* w,
                                                            int64_t o0, int lane,
                                                            const int (&x_rows)[R], int n_rows,
                                                            float (&acc)[R]) {
  const int g = lane / P::kLanes, c = lane % P::kLanes;
  const uint8_t* wp = w + (o0 + g < p.out ? o0 + g : p.out - 1) * p.w_row_bytes;  // block b0
  const int nb = kFixedBlocks > 0 ? kFixedBlocks : static_cast<int>(p.in / P::kElems);
  const int8_t* xp[R];  // the lane's activations of block b0, per activation row
  const float2* dp[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    xp[r] = p.xq + x_rows[r] * p.in + P::XAt(c);
    dp[r] = p.xd + x_rows[r] * (p.in / 32) + P::DAt(c);
  }
  typename P::Raw ring[D];
#pragma unroll
  for (int k = 0; k < D; ++k) {
    if (k < nb) ring[k] = P::LoadRaw(wp + k * P::kBytes, c);
  }
  for (int b0 = 0; b0 < nb; b0 += D) {
#pragma unroll
    for (int k = 0; k < D; ++k) {
      const int b = b0 + k;
      if (b < nb) {
        const typename P::W wv = P::Decode(ring[k], b, c, p);
        if (b + D < nb) ring[k] = P::LoadRaw(wp + (k + D) * P::kBytes, c);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (r < n_rows) {
            acc[r] +=
                P::Dot(wv, P::LoadXAt(xp[r] + k * P::kElems, dp[r] + k * (P::kElems / 32)), c);
          }
        }
      }
    }
    wp += D * P::kBytes;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      xp[r] += D * P::kElems;
      dp[r] += D * (P::kElems / 32);
    }
  }
}

// Reduces acc over each lane group and stores y[y_rows[r]][o0 + g] for r < n_rows, o0 + g < out.
template <class P, int R>
__device__ __forceinline__ void StoreShortRows(const GemvParams& p, float (&acc)[R], int lane,
                                               int64_t o0, const int64_t (&y_rows)[R], int n_rows) {
  const int g = lane / P::kLanes, c = lane % P::kLanes;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r < n_rows) {
      float v = acc[r];
#pragma unroll
      for (int off = P::kLanes / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
      if (c == 0 && o0 + g < p.out) p.y[y_rows[r] * p.y_stride + o0 + g] = v;
    }
  }
}

// The warp's rows with either mapping (NR is unused when short). With one activation row the
// blocks decode through OneRowPiece (the same bits). kWaitAfterRing: see
// AccumulateRowsPointers (long rows only); kFixedBlocks: see AccumulateRowsPointers and
// AccumulateShortRowsPointers.
template <class P, int R, int NR, int D, bool kShort, bool kWaitAfterRing = false,
          int kFixedBlocks = 0>
__device__ __forceinline__ void DotAndStore(const GemvParams& p, const uint8_t* w, int64_t o0,
                                            int lane, const int (&x_rows)[R],
                                            const int64_t (&y_rows)[R], int n_rows) {
  static_assert(!(kShort && kWaitAfterRing), "the short-row mapping waits before its ring");
  using PD = std::conditional_t<R == 1, OneRowPiece<P>, P>;
  if constexpr (kShort) {
    float acc[R] = {};
    AccumulateShortRowsPointers<PD, R, D, kFixedBlocks>(p, w, o0, lane, x_rows, n_rows, acc);
    StoreShortRows<P, R>(p, acc, lane, o0, y_rows, n_rows);
  } else {
    float acc[NR][R] = {};
    AccumulateRowsPointers<PD, R, NR, D, kWaitAfterRing, kFixedBlocks>(p, w, o0, lane, x_rows,
                                                                       n_rows, acc);
    StoreRows<R, NR>(p, acc, lane, o0, y_rows, n_rows);
  }
}

// Up to the first 4 KiB of each of the warp's rows (one 128-byte line per lane) into L2 while the
// quantizer may still run: only weights are touched before WaitForPrimaryGrid.
template <int NR>
__device__ __forceinline__ void PrefetchRows(const GemvParams& p, const uint8_t* w, int64_t o0,
                                             int lane) {
  const int64_t pre = p.w_row_bytes < 4096 ? p.w_row_bytes : 4096;
#pragma unroll
  for (int n = 0; n < NR; ++n) {
    const uint8_t* row = w + (o0 + n < p.out ? o0 + n : p.out - 1) * p.w_row_bytes;
    if (128 * lane < pre) PrefetchL2(row + 128 * lane);
  }
}

// Launches `kernel` with one warp per kRows output rows (grid x) and `grid_y` grid rows,
// optionally with programmatic stream serialization (see LaunchGemvQ8x).
// max_blocks_x > 0 caps grid x (a kernel whose warps loop over rows, GemvQ8GroupedKernel).
template <int kRows>
cudaError_t LaunchWarpRows(void (*kernel)(GemvParams), const GemvParams& p, int64_t grid_y,
                           bool overlap_previous, cudaStream_t stream, int64_t max_blocks_x = 0) {
  const int64_t warps = (p.out + kRows - 1) / kRows;
  int64_t blocks_x = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (max_blocks_x > 0 && blocks_x > max_blocks_x) blocks_x = max_blocks_x;
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(grid_y));
  return LaunchOverlapping(overlap_previous || PdlEnabled(), kernel, grid, dim3(kThreads), 0,
                           stream, p);
}

#endif  // STEPSERVE_KERNELS_MATMUL_GEMV_Q8X_ROWS_CUH_
