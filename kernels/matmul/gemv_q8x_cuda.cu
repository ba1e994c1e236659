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
// activation rows goes to the tensor-core kernel (gemv_mma_cuda.cu) first.
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "kernels/common/pdl.cuh"
#include "kernels/matmul/gemv_block_util.cuh"
#include "kernels/matmul/gemv_cuda_internal.h"
#include "kernels/matmul/q8_quantize.cuh"

namespace stepserve::kernels::gemv_internal {
namespace {

#include "kernels/matmul/gemv_q8x_pieces.cuh"

// acc[n][r] += output row o0 + n of matrix `w` dotted with activation row x_rows[r], r < n_rows.
// Per step every lane decodes its piece of one block of each of the NR weight rows, then each
// activation row's int8 piece is loaded once and dotted with all NR. Software pipeline: D steps
// of raw weight words in flight per warp (a register ring indexed only by unrolled constants);
// each step decodes the oldest slot, refills it with the step D ahead, then does the arithmetic,
// so HBM latency overlaps D - 1 steps of work. Rows past `out` re-read the last row.
template <class P, int R, int NR, int D>
__device__ __forceinline__ void AccumulateRows(const GemvParams& p, const uint8_t* w, int64_t o0,
                                               int lane, const int (&x_rows)[R], int n_rows,
                                               float (&acc)[NR][R]) {
  const uint8_t* rows[NR];
#pragma unroll
  for (int n = 0; n < NR; ++n) {
    rows[n] = w + (o0 + n < p.out ? o0 + n : p.out - 1) * p.w_row_bytes;
  }
  constexpr int kBlocksPerStep = 32 / P::kLanes;
  const int g = lane / P::kLanes, c = lane % P::kLanes;
  const int64_t nb = p.in / P::kElems;
  typename P::Raw ring[D][NR];
#pragma unroll
  for (int k = 0; k < D; ++k) {
    const int64_t bk = g + k * kBlocksPerStep;
#pragma unroll
    for (int n = 0; n < NR; ++n) {
      if (bk < nb) ring[k][n] = P::LoadRaw(rows[n] + bk * P::kBytes, c);
    }
  }
  for (int64_t b0 = g; b0 < nb; b0 += D * kBlocksPerStep) {
#pragma unroll
    for (int k = 0; k < D; ++k) {
      const int64_t b = b0 + k * kBlocksPerStep;
      if (b < nb) {
        typename P::W wv[NR];
#pragma unroll
        for (int n = 0; n < NR; ++n) wv[n] = P::Decode(ring[k][n], b, c, p);
        const int64_t next = b + D * kBlocksPerStep;
        if (next < nb) {
#pragma unroll
          for (int n = 0; n < NR; ++n) ring[k][n] = P::LoadRaw(rows[n] + next * P::kBytes, c);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (r < n_rows) {
            const typename P::X x = P::LoadX(p, x_rows[r], b, c);
#pragma unroll
            for (int n = 0; n < NR; ++n) acc[n][r] += P::Dot(wv[n], x, c);
          }
        }
      }
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
// weights = 5 blocks, which AccumulateRows spreads 4 blocks a step over the lanes, so the second
// step runs with one lane group in four): each lane group instead takes a row of its own, o0 + g,
// and walks all of its blocks, so every lane works on every step. acc[r] += that row dotted with
// activation row x_rows[r], r < n_rows.
template <class P>
inline constexpr int kShortRowsPerWarp = 32 / P::kLanes;

template <class P>
__host__ __device__ inline bool IsShortRow(int64_t in) {
  return in / P::kElems < 2 * kShortRowsPerWarp<P>;
}

template <class P, int R, int D>
__device__ __forceinline__ void AccumulateShortRows(const GemvParams& p, const uint8_t* w,
                                                    int64_t o0, int lane, const int (&x_rows)[R],
                                                    int n_rows, float (&acc)[R]) {
  const int g = lane / P::kLanes, c = lane % P::kLanes;
  const uint8_t* row = w + (o0 + g < p.out ? o0 + g : p.out - 1) * p.w_row_bytes;
  const int64_t nb = p.in / P::kElems;
  typename P::Raw ring[D];
#pragma unroll
  for (int k = 0; k < D; ++k) {
    if (k < nb) ring[k] = P::LoadRaw(row + k * P::kBytes, c);
  }
  for (int64_t b0 = 0; b0 < nb; b0 += D) {
#pragma unroll
    for (int k = 0; k < D; ++k) {
      const int64_t b = b0 + k;
      if (b < nb) {
        const typename P::W wv = P::Decode(ring[k], b, c, p);
        if (b + D < nb) ring[k] = P::LoadRaw(row + (b + D) * P::kBytes, c);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (r < n_rows) acc[r] += P::Dot(wv, P::LoadX(p, x_rows[r], b, c), c);
        }
      }
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

// The warp's rows with either mapping (NR is unused when short).
template <class P, int R, int NR, int D, bool kShort>
__device__ __forceinline__ void DotAndStore(const GemvParams& p, const uint8_t* w, int64_t o0,
                                            int lane, const int (&x_rows)[R],
                                            const int64_t (&y_rows)[R], int n_rows) {
  if constexpr (kShort) {
    float acc[R] = {};
    AccumulateShortRows<P, R, D>(p, w, o0, lane, x_rows, n_rows, acc);
    StoreShortRows<P, R>(p, acc, lane, o0, y_rows, n_rows);
  } else {
    float acc[NR][R] = {};
    AccumulateRows<P, R, NR, D>(p, w, o0, lane, x_rows, n_rows, acc);
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

// One warp: output rows o0 .. o0+kRows-1 (NR, or one per lane group on short rows), all
// activation rows (batch) reusing one decode of the weights. With one activation row the whole
// 4096-row matrix is one wave only at >= 8 blocks per SM, so registers are capped at 64 there.
// kMinBlocks: the CTAs per SM the register budget must allow (8: at most 64 registers).
// kExactRows: p.rows == R, known at compile time (no per-row guards; GemvExactRows).
template <class P, int R, int NR, int D, bool kIndexed, bool kShort,
          int kMinBlocks = R == 1 ? 8 : 1, bool kExactRows = false>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    GemvQ8Kernel(const __grid_constant__ GemvParams p) {
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
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  int x_rows[R];
  int64_t y_rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    x_rows[r] = x_row0 + r;
    y_rows[r] = y_row0 + r;
  }
  DotAndStore<P, R, NR, D, kShort>(p, w, o0, lane, x_rows, y_rows, kExactRows ? R : p.rows);
}

// Groups c0 .. c0 + RN - 1 of the slot's order (exactly RN of them) dotted with the warp's rows
// of `w` from o0: DotAndStore with every activation row in use, so no per-row guard is left.
template <class P, int RN, int NR, int D, bool kShort>
__device__ __forceinline__ void GroupChunk(const GemvParams& p, const uint8_t* w, int64_t o0,
                                           int lane, int c0) {
  int x_rows[RN];
  int64_t y_rows[RN];
#pragma unroll
  for (int r = 0; r < RN; ++r) {
    const int group = p.group_order[c0 + r];
    x_rows[r] = group / p.x_group_div;
    y_rows[r] = group;
  }
  DotAndStore<P, RN, NR, D, kShort>(p, w, o0, lane, x_rows, y_rows, RN);
}

// Grouped mode (MoE with several tokens): grid y = slots; slot s holds the groups that picked one
// expert, so its matrix is streamed once per R of them instead of once per group. Slot arrays
// come from the grouping kernel, which may still run when this one starts: read after the wait.
// kRowLoop (GroupedRowCtasPerSlot): fewer CTAs per slot, each warp taking output rows o0, o0 +
// the grid's rows, ...; otherwise one warp per kRows rows. (An L2 prefetch of the warp's next
// rows before each row block measured no gain on the H200: 16 / 64 streams 26.04 / 70.24 ms vs
// 26.06 / 70.25, bench/gpu/results-h200-v13.txt; removed.) kMinBlocks: CTAs per SM the register
// budget must allow (GroupedMinCtasPerSm). kExactRows: each chunk of n groups runs the dot loop
// compiled for exactly n activation rows (GroupChunk), not R rows with run-time guards.
template <class P, int R, int NR, int D, bool kShort, bool kRowLoop = false, int kMinBlocks = 1,
          bool kExactRows = false>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    GemvQ8GroupedKernel(const __grid_constant__ GemvParams p) {
  constexpr int kRows = kShort ? kShortRowsPerWarp<P> : NR;  // output rows per warp
  const int lane = threadIdx.x & 31;
  const int64_t first =
      (static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5)) * kRows;
  if (first >= p.out) return;
  const int slot = static_cast<int>(blockIdx.y);
  WaitForPrimaryGrid();  // the grouping kernel that writes the slot arrays may still run
  AllowDependentLaunch();
  const int32_t id = p.slot_matrix[slot];
  if (id == kSlotUnused) return;
  const int begin = p.slot_begin[slot], end = p.slot_begin[slot + 1];
  // Output rows o0 .. o0 + kRows - 1 of every group of the slot, then the warp's next rows.
  auto for_each_row_block = [&](auto&& rows) {
    if constexpr (kRowLoop) {
      const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock * kRows;
      for (int64_t o0 = first; o0 < p.out; o0 += stride) rows(o0);
    } else {
      rows(first);
    }
  };
  if (id < 0) {  // ids outside [0, n_matrices): zero rows, as the indexed mode writes
    for_each_row_block([&](int64_t o0) {
      for (int i = begin; i < end; ++i) {
        if (lane < kRows && o0 + lane < p.out) p.y[p.group_order[i] * p.y_stride + o0 + lane] = 0.f;
      }
    });
    return;
  }
  const uint8_t* w = p.w + id * p.w_matrix_bytes;
  for_each_row_block([&](int64_t o0) {
    for (int c0 = begin; c0 < end; c0 += R) {
      const int n_rows = end - c0 < R ? end - c0 : R;
      if constexpr (kExactRows) {
        static_assert(R == 4, "one case per chunk size");
        switch (n_rows) {
          case 1:
            GroupChunk<P, 1, NR, D, kShort>(p, w, o0, lane, c0);
            break;
          case 2:
            GroupChunk<P, 2, NR, D, kShort>(p, w, o0, lane, c0);
            break;
          case 3:
            GroupChunk<P, 3, NR, D, kShort>(p, w, o0, lane, c0);
            break;
          default:
            GroupChunk<P, 4, NR, D, kShort>(p, w, o0, lane, c0);
            break;
        }
      } else {
        int x_rows[R];
        int64_t y_rows[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int group = p.group_order[c0 + (r < n_rows ? r : n_rows - 1)];
          x_rows[r] = group / p.x_group_div;
          y_rows[r] = group;
        }
        DotAndStore<P, R, NR, D, kShort>(p, w, o0, lane, x_rows, y_rows, n_rows);
      }
    }
  });
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
template <int D, bool kRowLoop = false>
__global__ void __launch_bounds__(kThreads)
    GemvIq4XsOneRowKernel(const __grid_constant__ GemvParams p) {
  using P = PieceIQ4_XS;
  constexpr int kGroups = 32 / P::kLanes;  // blocks per warp step (lane group g = lane / 8)
  const int lane = threadIdx.x & 31;
  // kRowLoop: rows o_first, o_first + the grid's warps, ... (a capped grid, OneRowMaxCtas).
  const int64_t o_first = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (o_first >= p.out) return;
  const int64_t o_stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const int g = lane / P::kLanes, ib = lane % P::kLanes;
  const int nb = static_cast<int>(p.in / P::kElems);
  PrefetchRows<1>(p, p.w, o_first, lane);
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  for (int64_t o = o_first; o < p.out; o += o_stride) {
    const uint8_t* wp = p.w + o * p.w_row_bytes + g * P::kBytes;
    const int8_t* xp = p.xq + g * P::kElems + 32 * ib;
    const float2* dp = p.xd + g * (P::kElems / 32) + ib;
    typename P::Raw ring[D];
#pragma unroll
    for (int k = 0; k < D; ++k) {
      if (g + k * kGroups < nb) ring[k] = P::LoadRaw(wp + k * kGroups * P::kBytes, ib);
    }
    float acc = 0.0f;
    for (int b0 = g; b0 < nb; b0 += D * kGroups) {
#pragma unroll
      for (int k = 0; k < D; ++k) {
        const int b = b0 + k * kGroups;
        if (b < nb) {
          const typename P::W wv = P::Decode(ring[k], b, ib, p);
          if (b + D * kGroups < nb) {
            ring[k] = P::LoadRaw(wp + (k + D) * kGroups * P::kBytes, ib);
          }
          typename P::X x;
          x.a = __ldg(reinterpret_cast<const uint4*>(xp + k * kGroups * P::kElems));
          x.b = __ldg(reinterpret_cast<const uint4*>(xp + k * kGroups * P::kElems + 16));
          x.d = __ldg(&dp[k * kGroups * (P::kElems / 32)].x);
          acc += P::Dot(wv, x, ib);
        }
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

template <class P, int R, int NR, int D, bool kIndexed = false, bool kShort = false,
          int kMinBlocks = R == 1 ? 8 : 1, bool kExactRows = false>
cudaError_t Launch(const GemvParams& p, bool overlap_previous, cudaStream_t stream,
                   int64_t groups = 1) {
  return LaunchWarpRows < kShort
             ? kShortRowsPerWarp<P>
             : NR > (GemvQ8Kernel<P, R, NR, D, kIndexed, kShort, kMinBlocks, kExactRows>, p, groups,
                     overlap_previous, stream);
}

// 2-4 activation rows of IQ4_XS through GemvQ8Kernel compiled for exactly that many (kExactRows)
// unless STEPSERVE_GEMV_EXACT_ROWS=0 (then the R = 4 kernel with run-time row guards). Measured on
// the H200 (45 layers IQ4_XS, ms per step at 2 / 3 / 4 / 8 streams; results-h200-v14.txt call 4):
// 7.216 / 10.144 / 12.111 / 18.667 without, 7.021-7.061 / 9.713-9.730 / 11.500-11.572 /
// 18.570-18.666 with (the dense projections' GEMVs; 8 streams take the tensor-core GEMV).
bool GemvExactRows() {
  static const bool on = [] {
    const char* v = std::getenv("STEPSERVE_GEMV_EXACT_ROWS");
    return v == nullptr || v[0] != '0';
  }();
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
      if (const int64_t cap = OneRowMaxCtas(); cap > 0 && cap * kWarpsPerBlock < p.out) {
        return LaunchWarpRows<1>(GemvIq4XsOneRowKernel<P::kDepth1, true>, p, 1, overlap_previous,
                                 stream, cap);
      }
      return LaunchWarpRows<1>(GemvIq4XsOneRowKernel<P::kDepth1>, p, 1, overlap_previous, stream);
    }
    if (p.rows <= 4 && GemvExactRows()) {
      return LaunchExactRows<P, false, 2, 2>(p, overlap_previous, stream);
    }
  }
  if (p.rows == 1) return Launch<P, 1, 1, P::kDepth1>(p, overlap_previous, stream);
  if (p.rows <= 4) return Launch<P, 4, 2, 2>(p, overlap_previous, stream);
  if (p.rows <= 8) return Launch<P, 8, 2, 2>(p, overlap_previous, stream);
  return Launch<P, 16, 2, 2>(p, overlap_previous, stream);
}

}  // namespace

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
  switch (type) {
    case GgmlType::kQ8_0:
      return LaunchRows<PieceQ8_0>(p, overlap_previous, stream);
    case GgmlType::kQ4_K:
      return LaunchRows<PieceQ4_K>(p, overlap_previous, stream);
    case GgmlType::kQ5_K:
      return LaunchRows<PieceQ5_K>(p, overlap_previous, stream);
    case GgmlType::kQ6_K:
      return LaunchRows<PieceQ6_K>(p, overlap_previous, stream);
    case GgmlType::kIQ4_XS:
      return LaunchRows<PieceIQ4_XS>(p, overlap_previous, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

namespace {

// CTAs per slot of the grouped GEMV (0: one warp per row pair; N: at most N CTAs per slot, each
// warp looping over row pairs). STEPSERVE_GROUPED_ROW_CTAS=N fixes N (0: no loop); by default
// kGroupedRowCtas from kGroupedLoopMinSlots slots (16+ streams of 8 routed + 1 shared expert),
// none below. Measured on the H200 (45 layers IQ4_XS, ms per step; bench/gpu/results-h200-v12.txt):
// 64 streams (289 slots) 76.7 with no loop, 74.2 / 71.5-71.8 / 70.2 / 69.9 at 16 / 24 / 32 / 48
// per slot, 8 per slot 84.0; 32 streams 53.0 -> 49.9 at 24; 16 streams (144 slots) 26.8 -> 25.9
// at 49; but 4 and 8 streams (36 / 72 slots) 11.18 -> 11.54 and 16.93 -> 17.19 at 193 / 97. One
// warp per row pair is ~46k CTAs of 4 warps per projection at 64 streams: CTA launch and drain,
// not bytes, limit it there.
// IQ4_XS (session 15, with the 5-CTA register cap and the exact-rows dispatch of the loop form):
// the loop form at every slot count, at least kGroupedRowCtas per slot and kGroupedRowCtaBudget
// CTAs in all (36 slots: 192, 72: 96; a cap at or above what one warp per row block needs leaves
// each warp one row block). Measured on the H200 before this rule, with the cap and exact rows
// (bench/gpu/results-h200-v14.txt, call 4): 4 streams 11.50-11.57 -> 11.06 ms at 193 per slot, 8
// streams 18.57-18.67 -> 16.00 at 97.
constexpr int64_t kGroupedRowCtas = 48;
constexpr int64_t kGroupedLoopMinSlots = 128;
constexpr int64_t kGroupedRowCtaBudget = 6912;
int64_t GroupedRowCtasPerSlot(int64_t slots, bool iq4_xs) {
  static const int64_t setting = [] {
    const char* v = std::getenv("STEPSERVE_GROUPED_ROW_CTAS");
    return v == nullptr ? int64_t{-1} : static_cast<int64_t>(std::atoll(v));
  }();
  if (setting >= 0) return setting;
  if (iq4_xs) {
    const int64_t spread = (kGroupedRowCtaBudget + slots - 1) / slots;
    return spread > kGroupedRowCtas ? spread : kGroupedRowCtas;
  }
  return slots >= kGroupedLoopMinSlots ? kGroupedRowCtas : 0;
}

// Resident CTAs per SM the row-looping grouped IQ4_XS kernels' register cap allows: 5 (96
// registers, no spills), or none with STEPSERVE_GROUPED_MIN_CTAS=1. Why: at 64 streams ncu showed
// the gate / up and down kernels at 128 / 104 registers, 4 CTAs (16 warps) per SM, 0.61-0.63
// instructions issued per scheduler cycle with no warp eligible in 37-38% of cycles, DRAM at
// 18-24%. Measured on the H200 (45 layers IQ4_XS, ms per step at 16 / 32 / 64 streams,
// bench/gpu/results-h200-v14.txt): none 27.33-27.36 / 48.14-48.20 / 73.71-73.87, 5 CTAs 26.04 /
// 46.25 / 70.63, 6 (spills) 27.16 / 48.04 / 73.75, 8 (more spills) 31.86 / 55.83 / 86.07.
constexpr int kGroupedMinCtasPerSm = 5;
int GroupedMinCtasPerSm() {
  static const int ctas = [] {
    const char* v = std::getenv("STEPSERVE_GROUPED_MIN_CTAS");
    return v != nullptr && std::atoi(v) == 1 ? 1 : kGroupedMinCtasPerSm;
  }();
  return ctas;
}

// The row-looping grouped IQ4_XS kernels with kExactRows, unless STEPSERVE_GROUPED_EXACT_ROWS=0.
// (The kernels without the loop and register cap lost with it at 3 / 4 / 8 streams: 9.72 / 11.54
// / 18.62 ms against 9.56 / 11.41 / 18.34, results-h200-v14.txt call 4; not kept.)
// Measured on the H200 (45 layers IQ4_XS, ms per step at 16 / 32 / 64 streams, two runs each,
// bench/gpu/results-h200-v14.txt): 26.11 / 46.19 / 70.53 and 26.09 / 46.17 / 70.44 without,
// 24.11 / 44.30 / 68.23 and 24.09 / 44.21 / 68.33 with; ncu at 64 streams (base clocks): gate /
// up 408 -> 390 us, down 484 -> 466 us. The guarded form branches around every activation row's
// loads, dots and reduction in each step; the exact forms' code is 2.5x larger (4 copies).
bool GroupedExactRows() {
  static const bool on = [] {
    const char* v = std::getenv("STEPSERVE_GROUPED_EXACT_ROWS");
    return v == nullptr || v[0] != '0';
  }();
  return on;
}

// The row-looping grouped kernel with the register cap of GroupedMinCtasPerSm and the exact-rows
// dispatch of GroupedExactRows (IQ4_XS only; other types were not measured with them).
template <class P, int R, int NR, int D, bool kShort>
auto RowLoopGroupedKernel() -> void (*)(GemvParams) {
  if constexpr (std::is_same_v<P, PieceIQ4_XS>) {
    if (GroupedExactRows()) {
      return GroupedMinCtasPerSm() > 1
                 ? GemvQ8GroupedKernel<P, R, NR, D, kShort, true, kGroupedMinCtasPerSm, true>
                 : GemvQ8GroupedKernel<P, R, NR, D, kShort, true, 1, true>;
    }
    if (GroupedMinCtasPerSm() > 1) {
      return GemvQ8GroupedKernel<P, R, NR, D, kShort, true, kGroupedMinCtasPerSm>;
    }
  }
  return GemvQ8GroupedKernel<P, R, NR, D, kShort, true>;
}

template <class P>
cudaError_t LaunchGrouped(const GemvParams& p, int64_t slots, bool overlap_previous,
                          cudaStream_t stream) {
  // The rows <= 4 shape of LaunchRows. One row per warp with the one-row ring depth (more warps,
  // more blocks in flight) measured slower on the H200: batch 16 / 64 decode 450.9 / 709.4 vs
  // 514.9 / 827.0 tok/s (bench/gpu/results-h200-ab-v5.txt).
  constexpr int kR = 4, kNR = 2, kD = 2;
  constexpr bool kIq4Xs = std::is_same_v<P, PieceIQ4_XS>;
  // The row loop where the cap is below the CTAs one warp per row block would need; for IQ4_XS
  // the loop form (register cap, exact rows) at any cap.
  const int64_t max_blocks = GroupedRowCtasPerSlot(slots, kIq4Xs);
  auto loops = [&](int64_t rows_per_warp) {
    const int64_t warps = (p.out + rows_per_warp - 1) / rows_per_warp;
    return max_blocks > 0 && (kIq4Xs || max_blocks < (warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
  };
  if (IsShortRow<P>(p.in)) {
    constexpr int kShortRows = kShortRowsPerWarp<P>;
    if (loops(kShortRows)) {
      return LaunchWarpRows<kShortRows>(RowLoopGroupedKernel<P, kR, 1, P::kDepth1, true>(), p,
                                        slots, overlap_previous, stream, max_blocks);
    }
    return LaunchWarpRows<kShortRows>(GemvQ8GroupedKernel<P, kR, 1, P::kDepth1, true>, p, slots,
                                      overlap_previous, stream);
  }
  if (loops(kNR)) {
    return LaunchWarpRows<kNR>(RowLoopGroupedKernel<P, kR, kNR, kD, false>(), p, slots,
                               overlap_previous, stream, max_blocks);
  }
  return LaunchWarpRows<kNR>(GemvQ8GroupedKernel<P, kR, kNR, kD, false>, p, slots, overlap_previous,
                             stream);
}

template <class P>
cudaError_t LaunchIndexed(const GemvParams& p, int64_t groups, bool overlap_previous,
                          cudaStream_t stream) {
  constexpr int D = P::kDepth1;
  return IsShortRow<P>(p.in) ? Launch<P, 1, 1, D, true, true>(p, overlap_previous, stream, groups)
                             : Launch<P, 1, 1, D, true, false>(p, overlap_previous, stream, groups);
}

}  // namespace

cudaError_t LaunchGemvQ8xGrouped(GgmlType type, const GemvParams& p, int64_t slots,
                                 bool overlap_previous, cudaStream_t stream) {
  if (p.slot_matrix == nullptr || p.slot_begin == nullptr || p.group_order == nullptr ||
      slots < 1 || slots > 65535) {
    return cudaErrorInvalidValue;
  }
  switch (type) {
    case GgmlType::kQ8_0:
      return LaunchGrouped<PieceQ8_0>(p, slots, overlap_previous, stream);
    case GgmlType::kQ4_K:
      return LaunchGrouped<PieceQ4_K>(p, slots, overlap_previous, stream);
    case GgmlType::kQ5_K:
      return LaunchGrouped<PieceQ5_K>(p, slots, overlap_previous, stream);
    case GgmlType::kQ6_K:
      return LaunchGrouped<PieceQ6_K>(p, slots, overlap_previous, stream);
    case GgmlType::kIQ4_XS:
      return LaunchGrouped<PieceIQ4_XS>(p, slots, overlap_previous, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t LaunchGemvQ8xIndexed(GgmlType type, const GemvParams& p, int64_t groups,
                                 bool overlap_previous, cudaStream_t stream) {
  if (p.matrix_ids == nullptr || p.rows != 1 || groups < 1 || groups > 65535) {
    return cudaErrorInvalidValue;
  }
  if (const cudaError_t err = LaunchGemvQ8xStream(type, p, groups, overlap_previous, stream);
      err != cudaErrorNotSupported) {
    return err;
  }
  switch (type) {
    case GgmlType::kQ8_0:
      return LaunchIndexed<PieceQ8_0>(p, groups, overlap_previous, stream);
    case GgmlType::kQ4_K:
      return LaunchIndexed<PieceQ4_K>(p, groups, overlap_previous, stream);
    case GgmlType::kQ5_K:
      return LaunchIndexed<PieceQ5_K>(p, groups, overlap_previous, stream);
    case GgmlType::kQ6_K:
      return LaunchIndexed<PieceQ6_K>(p, groups, overlap_previous, stream);
    case GgmlType::kIQ4_XS:
      return LaunchIndexed<PieceIQ4_XS>(p, groups, overlap_previous, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace stepserve::kernels::gemv_internal
