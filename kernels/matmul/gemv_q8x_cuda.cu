// Int8-activation GEMV (GemvCudaActivations::kQ8, see matmul_cuda.h) and the activation quantizer.
//
// Why this shape: a decode GEMV must stream every weight byte from HBM once, and at 4 TB/s an
// IQ4_XS/Q4_K weight (~0.55 byte) arrives every ~0.14 ns per SM-cycle budget, so the per-weight
// work on the SM has to be a few instructions and ~1 byte of L1 traffic. The F32 path spends a
// 4-byte activation load plus a table lookup and a float convert per weight per output row and is
// L1-bound at 11-41% of HBM bandwidth (measured, docs/cuda-host.md). Here:
//  - activations are int8 (quantized once per call by QuantizeQ8Kernel: 1 byte per value, shared
//    by all output rows through L1/L2) and dotted 4 at a time with __dp4a on packed weight bytes;
//  - IQ4_XS nibbles go through the 16-entry table with __byte_perm on 4 registers (no shared
//    memory; the quantizer stores IQ4_XS activations in the order the lookup yields weights, so
//    there is no de-interleave), Q4_K/Q6_K nibbles are masked into bytes, Q8_0 bytes are used as
//    they are;
//  - integer dot sums become floats through the 2^23 exponent trick (two full-rate ops instead of
//    a quarter-rate I2F);
//  - each warp computes NR output rows that share the activation loads, and all activation rows
//    (batch) reuse one decode of the weights: batch 8 costs little more weight work than batch 1;
//  - before waiting for the quantizer (programmatic dependent launch), each warp prefetches the
//    start of its weight rows into L2, so the quantizer's run and the launch gap overlap HBM reads.
// The lane -> block-piece mapping per type keeps each warp's weight loads on one contiguous
// stretch of the row (coalesced), 16-byte loads where the block alignment allows; rows of fewer
// blocks than two warp steps give each lane group a row of its own instead. IQ4_XS with 8-16
// activation rows goes to the tensor-core kernel (gemv_mma_cuda.cu) first. The warp pieces are in
// gemv_q8x_rows.cuh, shared with the grouped (MoE) GEMV of gemv_q8x_grouped_cuda.cu.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/matmul/gemv_block_util.cuh"
#include "kernels/matmul/gemv_cuda_internal.h"
#include "kernels/matmul/q8_quantize.cuh"

namespace stepserve::kernels::gemv_internal {
namespace {

#include "kernels/matmul/gemv_q8x_pieces.cuh"
#include "kernels/matmul/gemv_q8x_pieces_low_bit.cuh"
#include "kernels/matmul/gemv_q8x_rows.cuh"

// One warp: output rows o0 .. o0+kRows-1 (NR, or one per lane group on short rows), all
// activation rows (batch) reusing one decode of the weights. With one activation row the whole
// 4096-row matrix is one wave only at >= 8 blocks per SM, so registers are capped at 64 there.
// kMinBlocks: the CTAs per SM the register budget must allow (8: at most 64 registers).
// kExactRows: p.rows == R, known at compile time (no per-row guards; GemvExactRows).
// kEarly (WeightsBeforeWait, plain long rows only): the first ring of weight words is loaded
// before the PDL wait (AccumulateRows' kWaitAfterRing).
template <class P, int R, int NR, int D, bool kIndexed, bool kShort,
          int kMinBlocks = R == 1 ? 8 : 1, bool kExactRows = false, bool kEarly = false>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    GemvQ8Kernel(const __grid_constant__ GemvParams p) {
  static_assert(!kEarly || (!kIndexed && !kShort), "early weights: plain long rows only");
  constexpr int kRows = kShort ? kShortRowsPerWarp<P> : NR;  // output rows per warp
  const int lane = threadIdx.x & 31;
  const int64_t o0 =
      (static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5)) * kRows;
  if (o0 >= p.out) return;
  // Indexed (MoE) mode: this grid row's expert matrix, activation row and output row. The router
  // that writes the ids may still run (every kernel lets its dependent start early), so wait
  // first; the plain mode prefetches its weights into L2 while the kernels before it finish.
  const uint8_t* w = p.w;
  int x_row0 = 0;
  int64_t y_row0 = 0;
  if constexpr (kIndexed) {
    WaitForPrimaryGrid();
    const int g = static_cast<int>(blockIdx.y);
    const int32_t id = p.matrix_ids[g];
    if (id < 0 || id >= p.n_matrices) {
      if (lane < kRows && o0 + lane < p.out) p.y[g * p.y_stride + o0 + lane] = 0.f;
      return;
    }
    w += id * p.w_matrix_bytes;
    x_row0 = g / p.x_group_div;
    y_row0 = g;
  }
  PrefetchRows<kRows>(p, w, o0, lane);
  if constexpr (!kEarly) {
    WaitForPrimaryGrid();
    AllowDependentLaunch();
  }
  int x_rows[R];
  int64_t y_rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    x_rows[r] = x_row0 + r;
    y_rows[r] = y_row0 + r;
  }
  DotAndStore<P, R, NR, D, kShort, kEarly>(p, w, o0, lane, x_rows, y_rows, kExactRows ? R : p.rows);
}

using OneRowIq4Xs = OneRowPiece<PieceIQ4_XS>;

// One pipeline iteration of a lane group of the one-row IQ4_XS GEMV: steps k = 0 .. D - 1 take
// block b0 + k G (G = blocks per warp step) from ring[k] and refill it with the block D steps on.
// kGuarded: a step only where its block exists and a refill only where that one does (a row's
// last iterations); otherwise every step exists, and kRefill says whether all refill or none (the
// row's last iteration) - no per-step branches, so the steps can be scheduled as one stretch.
// The same arithmetic in the same order either way (bit-identical results).
template <int D, bool kGuarded, bool kRefill>
__device__ __forceinline__ void OneRowIq4XsSteps(const GemvParams& p,
                                                 typename OneRowIq4Xs::Raw (&ring)[D],
                                                 const uint8_t* wp, const int8_t* xp,
                                                 const float2* dp, int b0, int nb, int ib,
                                                 float& acc) {
  using P = OneRowIq4Xs;
  constexpr int kGroups = 32 / P::kLanes;
#pragma unroll
  for (int k = 0; k < D; ++k) {
    const int b = b0 + k * kGroups;
    if (!kGuarded || b < nb) {
      const typename P::W wv = P::Decode(ring[k], b, ib, p);
      if (kGuarded ? b + D * kGroups < nb : kRefill) {
        ring[k] = P::LoadRaw(wp + (k + D) * kGroups * P::kBytes, ib);
      }
      typename P::X x;
      x.a = __ldg(reinterpret_cast<const uint4*>(xp + k * kGroups * P::kElems));
      x.b = __ldg(reinterpret_cast<const uint4*>(xp + k * kGroups * P::kElems + 16));
      x.d = __ldg(&dp[k * kGroups * (P::kElems / 32)].x);
      acc += P::Dot(wv, x, ib);
    }
  }
}

// The one-row IQ4_XS GEMV (the batch-1 decode's kernel for most IQ4_XS matrices): the per-lane
// arithmetic of GemvQ8Kernel<PieceIQ4_XS, 1, 1, D> in the same order (bit-identical results)
// with lean addressing - 32-bit block counters, weight / activation / scale pointers advanced by
// constants instead of 64-bit index products per step, lane constants computed once, no register
// cap (55 registers). Why: the session-8 profile of the generic kernel (ncu: ~146 instructions per
// lane per 32 weights, 0.47 issued per scheduler-cycle) showed ~30 instructions per step of index
// math, recomputed lane constants and ring moves. Measured on the H200 (session 9, bench_gemv
// --quick 4096x12288 / 12288x4096): 16.50 / 15.69 -> 16.28 / 14.09 us; 45-layer decode batch 1
// 7.597 -> 7.364 ms. Lifting the generic kernel's 64-register cap instead (1 or 2 rows per warp,
// depth 2 or 4) gained 15.2-15.3 / 15.0-15.1 us and 7.48-7.50 ms, so those variants were dropped.
// kEarly (WeightsBeforeWait): the first row's ring of raw blocks is loaded before the PDL wait.
// kWhole (GemvIq4XsOneRowWholeKernel below): iterations whose D steps all exist run without
// per-step guards (OneRowIq4XsSteps).
template <int D, bool kRowLoop, bool kEarly, bool kWhole>
__device__ __forceinline__ void GemvIq4XsOneRow(const GemvParams& p) {
  using P = OneRowIq4Xs;
  constexpr int kGroups = 32 / P::kLanes;  // blocks per warp step (lane group g = lane / 8)
  const int lane = threadIdx.x & 31;
  // kRowLoop: rows o_first, o_first + the grid's warps, ... (a capped grid, OneRowMaxCtas).
  const int64_t o_first = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (o_first >= p.out) return;
  const int64_t o_stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const int g = lane / P::kLanes, ib = lane % P::kLanes;
  const int nb = static_cast<int>(p.in / P::kElems);
  PrefetchRows<1>(p, p.w, o_first, lane);
  typename P::Raw ring[D];
  const auto load_ring = [&](const uint8_t* wp) {
#pragma unroll
    for (int k = 0; k < D; ++k) {
      if (g + k * kGroups < nb) ring[k] = P::LoadRaw(wp + k * kGroups * P::kBytes, ib);
    }
  };
  if constexpr (kEarly) load_ring(p.w + o_first * p.w_row_bytes + g * P::kBytes);
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  for (int64_t o = o_first; o < p.out; o += o_stride) {
    const uint8_t* wp = p.w + o * p.w_row_bytes + g * P::kBytes;
    const int8_t* xp = p.xq + g * P::kElems + 32 * ib;
    const float2* dp = p.xd + g * (P::kElems / 32) + ib;
    if (!kEarly || o != o_first) load_ring(wp);
    float acc = 0.0f;
    for (int b0 = g; b0 < nb; b0 += D * kGroups) {
      if (kWhole && b0 + (2 * D - 1) * kGroups < nb) {  // this iteration and the next whole
        OneRowIq4XsSteps<D, false, true>(p, ring, wp, xp, dp, b0, nb, ib, acc);
      } else if (kWhole && b0 + (D - 1) * kGroups < nb && b0 + D * kGroups >= nb) {  // the last
        OneRowIq4XsSteps<D, false, false>(p, ring, wp, xp, dp, b0, nb, ib, acc);
      } else {
        OneRowIq4XsSteps<D, true, true>(p, ring, wp, xp, dp, b0, nb, ib, acc);
      }
      wp += D * kGroups * P::kBytes;
      xp += D * kGroups * P::kElems;
      dp += D * kGroups * (P::kElems / 32);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, off);
    if (lane == 0) p.y[o] = acc;
    if constexpr (!kRowLoop) break;  // one row per warp: the loop's registers stay free
  }
}

template <int D, bool kRowLoop = false, bool kEarly = false>
__global__ void __launch_bounds__(kThreads)
    GemvIq4XsOneRowKernel(const __grid_constant__ GemvParams p) {
  GemvIq4XsOneRow<D, kRowLoop, kEarly, false>(p);
}

// STEPSERVE_GEMV_ONE_ROW_WHOLE=1 (session 44, not yet measured): the kernel above, early first
// ring, with whole iterations free of per-step guards - SASS per iteration of 4 steps ~252
// instructions for a row's last (no refills: a 4096-wide row has only that one) and ~270-280 with
// refills, against ~339 guarded - capped at 8 CTAs per SM (64 registers) so that a 4096-row
// matrix stays one wave and the row loop's 2112 CTAs two (uncapped, the row-loop form took 67).
// A kernel of its own because even `__launch_bounds__(..., 1)` changed the default kernel's SASS.
template <int D, bool kRowLoop>
__global__ void __launch_bounds__(kThreads, 8)
    GemvIq4XsOneRowWholeKernel(const __grid_constant__ GemvParams p) {
  GemvIq4XsOneRow<D, kRowLoop, true, true>(p);
}

// One thread per 4 activations, 8 threads per 32-value block (a row holds whole blocks, so the
// 8 lanes of a group are always all active or all past the end together).
__global__ void __launch_bounds__(256)
    QuantizeQ8Kernel(const __grid_constant__ GemvParams p, int8_t* xq, float2* xd) {
  // Let the dependent GEMV launch now; it waits for this grid's completion before reading. This
  // grid itself may have started before the kernel that writes x finished (it is launched with
  // programmatic serialization): wait for that one before reading x or writing the scratch.
  AllowDependentLaunch();
  WaitForPrimaryGrid();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t per_row = p.in / 4;
  if (t >= per_row * p.rows) return;
  const int64_t r = t / per_row, k = 4 * (t - r * per_row);
  const float4 v = __ldg(reinterpret_cast<const float4*>(p.x + r * p.x_stride + k));
  const unsigned mask = 0xFFu << (threadIdx.x & 24);
  const q8_quantize::Q8Four q = q8_quantize::QuantizeQ8Four(v, mask);
  q8_quantize::StoreQ8Four(q, k, xq + r * p.in, xd + r * (p.in / 32), p.x_pair_order, mask);
}

// CTAs of the one-row IQ4_XS GEMV: at most kOneRowMaxCtas (16 CTAs of 4 warps on each of the
// H200's 132 SMs: one resident wave), each warp looping over rows when the matrix has more (the
// fused q/k/v/gate projection at batch 1: 5632 rows); STEPSERVE_GEMV_ROW_CTAS=N sets the cap, 0
// turns the loop off (one row per warp). Measured on the H200 (45 layers IQ4_XS, one A/B run,
// bench/gpu/results-h200-v12.txt): batch 1 5.236 / 5.249 -> 5.179 ms at 2112 CTAs, 5.256 at 1056.
constexpr int64_t kOneRowMaxCtas = 2112;
int64_t OneRowMaxCtas() {
  static const int64_t cap = [] {
    const char* v = std::getenv("STEPSERVE_GEMV_ROW_CTAS");
    if (v == nullptr) return kOneRowMaxCtas;
    const int64_t n = static_cast<int64_t>(std::atoll(v));
    return n > 0 ? n : int64_t{0};
  }();
  return cap;
}

bool OneRowWhole() { return GemvOneRowWholeSetting().load(std::memory_order_relaxed); }

template <class P, int R, int NR, int D, bool kIndexed = false, bool kShort = false,
          int kMinBlocks = R == 1 ? 8 : 1, bool kExactRows = false, bool kEarly = false>
cudaError_t Launch(const GemvParams& p, bool overlap_previous, cudaStream_t stream,
                   int64_t groups = 1) {
  return LaunchWarpRows < kShort
             ? kShortRowsPerWarp<P>
             : NR > (GemvQ8Kernel<P, R, NR, D, kIndexed, kShort, kMinBlocks, kExactRows, kEarly>, p,
                     groups, overlap_previous, stream);
}

// CTAs per SM the one-row kernel's register budget must allow (GemvQ8Kernel's kMinBlocks at one
// activation row): 8, i.e. 64 registers. Q4_K spills 40 bytes under that cap (ptxas; the lean
// one-row kernel IQ4_XS has instead runs uncapped at 55), so its floor is 6 (80 registers, no
// spills). Measured on the H200 (45 layers Q4_K_M mix, batch 1, alternating pairs; session 18
// call 1): 5.922 / 5.922 ms per step at 8, 5.887 / 5.892 at 6; batch 2 equal (8.727-8.739).
// -DSTEPSERVE_Q4K_ONE_ROW_MIN_BLOCKS=N builds another floor for a compile-time A/B
// (bench/gpu/call-lib-h200.sh, CALL_CMAKE_ARGS).
#ifndef STEPSERVE_Q4K_ONE_ROW_MIN_BLOCKS
#define STEPSERVE_Q4K_ONE_ROW_MIN_BLOCKS 6
#endif
template <class P>
inline constexpr int kOneRowMinBlocks = 8;
template <>
inline constexpr int kOneRowMinBlocks<PieceQ4_K> = STEPSERVE_Q4K_ONE_ROW_MIN_BLOCKS;

// 2-4 activation rows of IQ4_XS through GemvQ8Kernel compiled for exactly that many (kExactRows)
// unless STEPSERVE_GEMV_EXACT_ROWS=0 (then the R = 4 kernel with run-time row guards). Measured on
// the H200 (45 layers IQ4_XS, ms per step at 2 / 3 / 4 / 8 streams; results-h200-v14.txt call 4):
// 7.216 / 10.144 / 12.111 / 18.667 without, 7.021-7.061 / 9.713-9.730 / 11.500-11.572 /
// 18.570-18.666 with (the dense projections' GEMVs; 8 streams take the tensor-core GEMV).
bool GemvExactRows() {
  static const bool on = EnvSwitchOn("STEPSERVE_GEMV_EXACT_ROWS");
  return on;
}

// The exact-rows kernels for 2..4 rows (IQ4_XS; short rows: one row per lane group).
template <class P, bool kShort, int NR, int D>
cudaError_t LaunchExactRows(const GemvParams& p, bool overlap_previous, cudaStream_t stream) {
  switch (p.rows) {
    case 2:
      return Launch<P, 2, NR, D, false, kShort, 1, true>(p, overlap_previous, stream);
    case 3:
      return Launch<P, 3, NR, D, false, kShort, 1, true>(p, overlap_previous, stream);
    default:
      return Launch<P, 4, NR, D, false, kShort, 1, true>(p, overlap_previous, stream);
  }
}

// Activation-row bound R (compile time, accumulators in registers), output rows per warp NR
// (sharing activation loads) and pipeline depth D. Measured on the H200 (docs/cuda-host.md): the
// first version (no ring, NR up to 4) stalled on load latency (ncu: 68% of stall cycles waiting on
// L1TEX) and had too few warps at NR = 4, so NR stays at 2 and the ring keeps loads in flight.
// Short rows take the row-per-lane-group mapping at the one-row depth (R = 8 shares R = 16's).
template <class P>
cudaError_t LaunchRows(const GemvParams& p, bool overlap_previous, cudaStream_t stream) {
  if (IsShortRow<P>(p.in)) {
    constexpr int D = P::kDepth1;
    if (p.rows == 1) return Launch<P, 1, 1, D, false, true>(p, overlap_previous, stream);
    if constexpr (std::is_same_v<P, PieceIQ4_XS>) {
      if (p.rows <= 4 && GemvExactRows()) {
        return LaunchExactRows<P, true, 1, D>(p, overlap_previous, stream);
      }
    }
    if (p.rows <= 4) return Launch<P, 4, 1, D, false, true>(p, overlap_previous, stream);
    return Launch<P, 16, 1, D, false, true>(p, overlap_previous, stream);
  }
  if constexpr (std::is_same_v<P, PieceIQ4_XS>) {
    if (p.rows == 1) {
      constexpr int D = P::kDepth1;
      const bool early = WeightsBeforeWait(kEarlyOneRowGemv), whole = early && OneRowWhole();
      if (const int64_t cap = OneRowMaxCtas(); cap > 0 && cap * kWarpsPerBlock < p.out) {
        return LaunchWarpRows<1>(whole   ? GemvIq4XsOneRowWholeKernel<D, true>
                                 : early ? GemvIq4XsOneRowKernel<D, true, true>
                                         : GemvIq4XsOneRowKernel<D, true>,
                                 p, 1, overlap_previous, stream, cap);
      }
      return LaunchWarpRows<1>(whole   ? GemvIq4XsOneRowWholeKernel<D, false>
                               : early ? GemvIq4XsOneRowKernel<D, false, true>
                                       : GemvIq4XsOneRowKernel<D>,
                               p, 1, overlap_previous, stream);
    }
    if (p.rows <= 4 && GemvExactRows()) {
      return LaunchExactRows<P, false, 2, 2>(p, overlap_previous, stream);
    }
  }
  if (p.rows == 1) {
    if (WeightsBeforeWait(kEarlyOneRowOther)) {
      return Launch<P, 1, 1, P::kDepth1, false, false, kOneRowMinBlocks<P>, false, true>(
          p, overlap_previous, stream);
    }
    return Launch<P, 1, 1, P::kDepth1, false, false, kOneRowMinBlocks<P>>(p, overlap_previous,
                                                                          stream);
  }
  if (p.rows <= 4) return Launch<P, 4, 2, 2>(p, overlap_previous, stream);
  if (p.rows <= 8) return Launch<P, 8, 2, 2>(p, overlap_previous, stream);
  return Launch<P, 16, 2, 2>(p, overlap_previous, stream);
}

}  // namespace

// STEPSERVE_GEMV_ONE_ROW_WHOLE=1: the one-row IQ4_XS GEMV's whole iterations without per-step
// guards (GemvIq4XsOneRowWholeKernel; with the early first ring only). Off: on the H100 (session
// 45, bench/gpu/results-v39.txt, one round) the GEMV alone gained (bench_gemv --rows, one row:
// 4096 x 12288 13.52 -> 12.75 us, 12288 x 4096 13.67 -> 13.21 us) but batch-1 decode did not
// (24 layers: 2.202 / 2.214 default and base -> 2.209 ms).
std::atomic<bool>& GemvOneRowWholeSetting() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("STEPSERVE_GEMV_ONE_ROW_WHOLE");
    return v != nullptr && v[0] == '1';
  }()};
  return on;
}

bool WeightsBeforeWait(EarlyWeights use) {
  static const int mask = [] {
    const char* v = std::getenv("STEPSERVE_WEIGHTS_BEFORE_WAIT");
    return v != nullptr ? std::atoi(v) : kEarlyOneRowGemv | kEarlyDownOneToken;
  }();
  return (mask & use) != 0;
}

cudaError_t LaunchQuantizeQ8(const GemvParams& p, int8_t* xq, float2* xd, cudaStream_t stream) {
  const int64_t threads = p.in / 4 * p.rows;
  // Overlaps the kernel before it, so the GEMV that follows, itself overlapping this one, starts
  // streaming weights sooner.
  return LaunchWithPdl(QuantizeQ8Kernel, dim3(static_cast<unsigned>((threads + 255) / 256)),
                       dim3(256), 0, stream, p, xq, xd);
}

cudaError_t LaunchGemvQ8x(GgmlType type, const GemvParams& p, bool overlap_previous,
                          cudaStream_t stream) {
  if (p.rows == 1) {
    const cudaError_t err = LaunchGemvQ8xStream(type, p, 1, overlap_previous, stream);
    if (err != cudaErrorNotSupported) return err;
  } else if (p.rows >= GemvMmaMinRows()) {
    const cudaError_t err = LaunchGemvQ8xMma(type, p, overlap_previous, stream);
    if (err != cudaErrorNotSupported) return err;
  }
  if (p.rows > kGemvMmaMaxRows) return cudaErrorInvalidValue;  // the dp4a kernels stop at 16
  return WithQ8xPieceAll(
      type, [&](auto piece) { return LaunchRows<decltype(piece)>(p, overlap_previous, stream); });
}

namespace {

template <class P>
cudaError_t LaunchIndexed(const GemvParams& p, int64_t groups, bool overlap_previous,
                          cudaStream_t stream) {
  constexpr int D = P::kDepth1;
  return IsShortRow<P>(p.in) ? Launch<P, 1, 1, D, true, true>(p, overlap_previous, stream, groups)
                             : Launch<P, 1, 1, D, true, false>(p, overlap_previous, stream, groups);
}

}  // namespace

cudaError_t LaunchGemvQ8xIndexed(GgmlType type, const GemvParams& p, int64_t groups,
                                 bool overlap_previous, cudaStream_t stream) {
  if (p.matrix_ids == nullptr || p.rows != 1 || groups < 1 || groups > 65535) {
    return cudaErrorInvalidValue;
  }
  if (const cudaError_t err = LaunchGemvQ8xStream(type, p, groups, overlap_previous, stream);
      err != cudaErrorNotSupported) {
    return err;
  }
  return WithQ8xPieceAll(type, [&](auto piece) {
    return LaunchIndexed<decltype(piece)>(p, groups, overlap_previous, stream);
  });
}

}  // namespace stepserve::kernels::gemv_internal
