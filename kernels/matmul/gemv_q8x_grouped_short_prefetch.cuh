// GemvQ8GroupedShortPrefetchKernel: the grouped GEMV's whole-row short rows (IQ4_XS expert down:
// 1280 = 5 blocks a row, one row per lane group) with each warp's next row block loaded before
// the current one's arithmetic (STEPSERVE_GROUPED_SHORT_PREFETCH=1). Included inside the anonymous
// namespace of gemv_q8x_grouped_cuda.cu, after gemv_q8x_rows.cuh.
//
// Why: in the depth-5 kernel (the default: GemvQ8GroupedKernel's exact-rows row loop with a ring
// over the whole row) a warp loads its row block's 5 blocks, waits, then decodes and dots them
// for every chunk of the slot's groups and stores, and only then issues the next row block's
// loads: each row block waits a full memory latency with none of the warp's loads in flight, and
// at 4 CTAs of 4 warps per SM the other warps do not cover it (64 streams, H100, ncu, session 30:
// the down launch 386 us against 264 us for the gate / up launches' same bytes). Here the ring of
// the next row block is issued as soon as the current one has been copied out of it, so a warp
// has a row block in flight while it computes: twice the raw words live (2 x 5 x 6 registers).
// The sums are the depth-5 kernel's: blocks in order per lane group, the same chunks of at most 4
// groups with the dot loop compiled per chunk size, the same reduction and stores - bit for bit.
#ifndef STEPSERVE_KERNELS_MATMUL_GEMV_Q8X_GROUPED_SHORT_PREFETCH_CUH_
#define STEPSERVE_KERNELS_MATMUL_GEMV_Q8X_GROUPED_SHORT_PREFETCH_CUH_

// The row block o0 (lane group g: row o0 + g, rows past `out` repeat the last one) of `w`, all of
// its nb <= D blocks, into `ring`.
template <class P, int D>
__device__ __forceinline__ void LoadShortRow(const GemvParams& p, const uint8_t* w, int64_t o0,
                                             int g, int c, int nb, typename P::Raw (&ring)[D]) {
  const uint8_t* row = w + (o0 + g < p.out ? o0 + g : p.out - 1) * p.w_row_bytes;
#pragma unroll
  for (int k = 0; k < D; ++k) {
    if (k < nb) ring[k] = P::LoadRaw(row + k * P::kBytes, c);
  }
}

// Groups c0 .. c0 + RN - 1 of the slot's order dotted with the row block held in `raw` (its nb
// blocks), stored at o0: AccumulateShortRowsPointers and StoreShortRows with the weights given.
template <class P, int RN, int D>
__device__ __forceinline__ void ShortChunkFromRing(const GemvParams& p,
                                                   const typename P::Raw (&raw)[D], int nb,
                                                   int64_t o0, int lane, int c0) {
  using PD = std::conditional_t<RN == 1, OneRowPiece<P>, P>;
  const int c = lane % P::kLanes;
  const int8_t* xp[RN];
  const float2* dp[RN];
  int64_t y_rows[RN];
#pragma unroll
  for (int r = 0; r < RN; ++r) {
    const int group = p.group_order[c0 + r];
    const int x_row = group / p.x_group_div;
    xp[r] = p.xq + x_row * p.in + PD::XAt(c);
    dp[r] = p.xd + x_row * (p.in / 32) + PD::DAt(c);
    y_rows[r] = group;
  }
  float acc[RN] = {};
#pragma unroll
  for (int k = 0; k < D; ++k) {
    if (k < nb) {
      const typename PD::W wv = PD::Decode(raw[k], k, c, p);
#pragma unroll
      for (int r = 0; r < RN; ++r) {
        acc[r] += PD::Dot(wv, PD::LoadXAt(xp[r] + k * P::kElems, dp[r] + k * (P::kElems / 32)), c);
      }
    }
  }
  StoreShortRows<P, RN>(p, acc, lane, o0, y_rows, RN);
}

// Grid (CTAs per slot, slots), each warp looping over row blocks o0 = first, first + the grid's
// rows, ... (the row-loop form's mapping); the launcher takes it only for rows of at most D blocks.
template <class P, int D, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    GemvQ8GroupedShortPrefetchKernel(const __grid_constant__ GemvParams p) {
  constexpr int kRows = kShortRowsPerWarp<P>;  // a row per lane group
  const int lane = threadIdx.x & 31;
  GroupedWarpWork work;
  if (!StartGroupedWarp<kRows>(p, work)) return;
  const int64_t first = work.first;
  const int32_t id = work.id;
  const int begin = work.begin, end = work.end;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock * kRows;
  if (id < 0) {  // ids outside [0, n_matrices): zero rows, as the indexed mode writes
    for (int64_t o0 = first; o0 < p.out; o0 += stride) ZeroSlotRows<kRows>(p, o0, lane, begin, end);
    return;
  }
  const uint8_t* w = p.w + id * p.w_matrix_bytes;
  const int g = lane / P::kLanes, c = lane % P::kLanes;
  const int nb = static_cast<int>(p.in / P::kElems);
  typename P::Raw ring[D];
  LoadShortRow<P, D>(p, w, first, g, c, nb, ring);
  for (int64_t o0 = first; o0 < p.out; o0 += stride) {
    typename P::Raw raw[D];
#pragma unroll
    for (int k = 0; k < D; ++k) raw[k] = ring[k];
    if (o0 + stride < p.out) LoadShortRow<P, D>(p, w, o0 + stride, g, c, nb, ring);
    for (int c0 = begin; c0 < end; c0 += 4) {
      switch (end - c0) {
        case 1:
          ShortChunkFromRing<P, 1, D>(p, raw, nb, o0, lane, c0);
          break;
        case 2:
          ShortChunkFromRing<P, 2, D>(p, raw, nb, o0, lane, c0);
          break;
        case 3:
          ShortChunkFromRing<P, 3, D>(p, raw, nb, o0, lane, c0);
          break;
        default:
          ShortChunkFromRing<P, 4, D>(p, raw, nb, o0, lane, c0);
          break;
      }
    }
  }
}

#endif  // STEPSERVE_KERNELS_MATMUL_GEMV_Q8X_GROUPED_SHORT_PREFETCH_CUH_
