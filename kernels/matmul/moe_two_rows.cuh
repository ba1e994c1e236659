// The gate / up kernel's two-row dot products (DotTwoRowsPointers, DotTwoRowsAllTokens and the
// steps of one ring iteration). Included inside the anonymous namespace of moe_decode_cuda.cu,
// after the pieces (gemv_q8x_pieces.cuh) and WarpSum.
#ifndef STEPSERVE_KERNELS_MATMUL_MOE_TWO_ROWS_CUH_
#define STEPSERVE_KERNELS_MATMUL_MOE_TWO_ROWS_CUH_

// Steps k = 0 .. D - 1 of one iteration of DotTwoRowsPointers: block b0 + k G of both rows from
// ring slot k, dotted with the activation row, the slot refilled. kGuarded: a step only where its
// block exists, the refill D steps on where that block exists and else the slot's own block again
// (never used; an unconditional load keeps ptxas from copying the ring); otherwise every step
// exists, and kRefill says whether all refill D steps on or none does (the row's last iteration).
// The same arithmetic in the same order either way (bit-identical sums).
template <class P, int D, bool kGuarded, bool kRefill>
__device__ __forceinline__ void TwoRowsSteps(const GemvParams& p, typename P::Raw (&ra)[D],
                                             typename P::Raw (&rb)[D], const uint8_t* pa,
                                             const uint8_t* pb, const int8_t* xp, const float2* dp,
                                             int b0, int nb, int c, float& acc_a, float& acc_b) {
  using P1 = OneRowPiece<P>;
  constexpr int kGroups = 32 / P::kLanes;
  constexpr int kStepBytes = kGroups * P::kBytes, kStepX = kGroups * P::kElems;
  constexpr int kStepD = kGroups * (P::kElems / 32);
#pragma unroll
  for (int k = 0; k < D; ++k) {
    const int b = b0 + k * kGroups;
    if (!kGuarded || b < nb) {
      const typename P1::W va = P1::Decode(ra[k], b, c, p);
      const typename P1::W vb = P1::Decode(rb[k], b, c, p);
      if (kGuarded) {
        const bool ahead = b + D * kGroups < nb;
        ra[k] = P::LoadRaw(pa + (ahead ? k + D : k) * kStepBytes, c);
        rb[k] = P::LoadRaw(pb + (ahead ? k + D : k) * kStepBytes, c);
      } else if (kRefill) {
        ra[k] = P::LoadRaw(pa + (k + D) * kStepBytes, c);
        rb[k] = P::LoadRaw(pb + (k + D) * kStepBytes, c);
      }
      const typename P::X x = P::LoadXAt(xp + k * kStepX, dp + k * kStepD);
      acc_a += P1::Dot(va, x, c);
      acc_b += P1::Dot(vb, x, c);
    }
  }
}

// Rows `wa` and `wb` (same type and length p.in) dotted with activation row x_row, sharing its
// loads; the warp-reduced sums in every lane. Lane group g = lane / kLanes walks blocks g, g + G,
// ... with D steps of raw words of both rows in flight, addressed by pointers that advance each
// iteration (gemv_q8x_rows.cuh's AccumulateRowsPointers with two rows: unconditional refills,
// past the row's end block b again). kWhole (STEPSERVE_MOE_GATE_UP_WHOLE, session 44, not yet
// measured): iterations whose D steps all exist run without the per-step guards.
template <class P, int D, bool kWhole = false>
__device__ __forceinline__ void DotTwoRowsPointers(const GemvParams& p, const uint8_t* wa,
                                                   const uint8_t* wb, int x_row, int lane,
                                                   float* sa, float* sb) {
  constexpr int kGroups = 32 / P::kLanes;
  constexpr int kStepBytes = kGroups * P::kBytes, kStepX = kGroups * P::kElems;
  constexpr int kStepD = kGroups * (P::kElems / 32);
  const int g = lane / P::kLanes, c = lane % P::kLanes;
  const int nb = static_cast<int>(p.in / P::kElems);
  const uint8_t* pa = wa + g * P::kBytes;  // the lane group's block of the iteration's first step
  const uint8_t* pb = wb + g * P::kBytes;
  const int8_t* xp = p.xq + x_row * p.in + g * P::kElems + P::XAt(c);
  const float2* dp = p.xd + x_row * (p.in / 32) + g * (P::kElems / 32) + P::DAt(c);
  typename P::Raw ra[D], rb[D];
#pragma unroll
  for (int k = 0; k < D; ++k) {
    if (g + k * kGroups < nb) {
      ra[k] = P::LoadRaw(pa + k * kStepBytes, c);
      rb[k] = P::LoadRaw(pb + k * kStepBytes, c);
    }
  }
  float acc_a = 0.f, acc_b = 0.f;
  for (int b0 = g; b0 < nb; b0 += D * kGroups) {
    if (kWhole && b0 + (2 * D - 1) * kGroups < nb) {  // this iteration and the next whole
      TwoRowsSteps<P, D, false, true>(p, ra, rb, pa, pb, xp, dp, b0, nb, c, acc_a, acc_b);
    } else if (kWhole && b0 + (D - 1) * kGroups < nb && b0 + D * kGroups >= nb) {  // the last
      TwoRowsSteps<P, D, false, false>(p, ra, rb, pa, pb, xp, dp, b0, nb, c, acc_a, acc_b);
    } else {
      TwoRowsSteps<P, D, true, true>(p, ra, rb, pa, pb, xp, dp, b0, nb, c, acc_a, acc_b);
    }
    pa += D * kStepBytes;
    pb += D * kStepBytes;
    xp += D * kStepX;
    dp += D * kStepD;
  }
  *sa = WarpSum(acc_a);
  *sb = WarpSum(acc_b);
}

// DotTwoRowsPointers against activation rows 0 .. n_rows - 1 (n_rows <= R) at once: the rows'
// weights are decoded once per block for all of them (one raw step in flight: R accumulator pairs
// fit the 64-register budget with little room).
template <class P, int R>
__device__ __forceinline__ void DotTwoRowsAllTokens(const GemvParams& p, const uint8_t* wa,
                                                    const uint8_t* wb, int n_rows, int lane,
                                                    float (&sa)[R], float (&sb)[R]) {
  constexpr int kGroups = 32 / P::kLanes;
  const int g = lane / P::kLanes, c = lane % P::kLanes;
  const int nb = static_cast<int>(p.in / P::kElems);
  float acc_a[R], acc_b[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc_a[r] = acc_b[r] = 0.f;
  typename P::Raw ra, rb;
  if (g < nb) {
    ra = P::LoadRaw(wa + g * P::kBytes, c);
    rb = P::LoadRaw(wb + g * P::kBytes, c);
  }
  for (int b = g; b < nb; b += kGroups) {
    const typename P::W va = P::Decode(ra, b, c, p);
    const typename P::W vb = P::Decode(rb, b, c, p);
    if (b + kGroups < nb) {
      ra = P::LoadRaw(wa + (b + kGroups) * P::kBytes, c);
      rb = P::LoadRaw(wb + (b + kGroups) * P::kBytes, c);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < n_rows) {
        const typename P::X x = P::LoadX(p, r, b, c);
        acc_a[r] += P::Dot(va, x, c);
        acc_b[r] += P::Dot(vb, x, c);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    sa[r] = WarpSum(acc_a[r]);
    sb[r] = WarpSum(acc_b[r]);
  }
}

#endif  // STEPSERVE_KERNELS_MATMUL_MOE_TWO_ROWS_CUH_
