// Tensor-core int8 GEMV for several activation rows (IQ4_XS weights, GemvCudaActivations::kQ8).
//
// Why: the dp4a GEMV (gemv_q8x_cuda.cu) decodes each weight once but then spends ~8 dp4a plus a
// scale multiply per 32 weights for every activation row, so 16 rows cost 3.5x one row (H200,
// bench_model profile). `mma.sync.m16n8k32.s8` does 16 weight rows x 32 weights x 8 activation
// rows in one instruction per warp: after the shared decode, each further 8 activation rows cost
// one MMA and a 4-value scale epilogue per 512 weights.
//
// Layout. A CTA owns 16 output rows (the MMA's M) and its 8 warps (4 with
// STEPSERVE_GEMV_MMA_8WARP_OUT, EightWarpOutFromEnv) split K by pairs of 256-weight IQ4_XS blocks.
// A warp copies its pair of blocks of all 16 rows (16 x 272 bytes, 17 16-byte pieces per row,
// 16-byte aligned since rows are) into its own two-stage shared-memory ring with cp.async: one copy
// instruction moves 512 bytes in runs of 272 contiguous bytes. The first version loaded the qs
// words straight from global memory, 16 bytes in each of 8 rows per load instruction, and took
// 30 us for 2-8 rows of 4096x12288, twice the one-row dp4a kernel (not profiled; many L1
// wavefronts per byte is the likely cause). Lane (g = lane / 4, t = lane % 4)
// then reads qs word t of each sub-block for rows g and g + 8 (a 272-byte row stride puts the 8
// rows 4 banks apart: conflict-free); Lookup16Pairs turns each word into the 8 table values in pair
// order, which are the MMA's A registers as they come (a0 / a2 for row g, a1 / a3 for row g + 8:
// k-slots 4t..4t+3 and 16+4t..16+4t+3). The activations are stored in the same pair order
// (Q8ScratchPosition), so the B registers of activation row 8j + g are the 8 bytes at 8t of its
// sub-block. Each MMA's int32 result (row, activation row) is that sub-block's exact integer dot;
// it is scaled by the weight sub-block scale and the activation block's d in F32. The warps'
// partial sums are added through shared memory at the end. The first copies are issued before
// waiting for the quantizer (programmatic dependent launch): weights do not depend on it.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include "kernels/common/dynamic_smem.h"
#include "kernels/common/pdl.cuh"
#include "kernels/matmul/gemv_block_util.cuh"
#include "kernels/matmul/gemv_cuda_internal.h"
#include "kernels/matmul/mma_iq4_util.cuh"

namespace stepserve::kernels::gemv_internal {
namespace {

#include "kernels/matmul/gemv_q8x_pieces.cuh"

constexpr int kMmaRowsM = 16;                        // output rows per CTA
constexpr int kPairBytes = kIq4PairBytes;            // 17 pieces of 16 bytes
constexpr int kStageBytes = kMmaRowsM * kPairBytes;  // one pair of blocks of the 16 rows
constexpr int kStages = 2;

// Copies pair `pair` (blocks 2 pair, 2 pair + 1) of the CTA's 16 rows of matrix `w` into `stage`
// (row r at r * kPairBytes). kPieces = 17 for a full pair, 9 for a last pair of one block: its 136
// bytes start 16-byte aligned and the 9th piece ends at the padded row end (rows are padded to 16).
template <int kPieces>
__device__ __forceinline__ void CopyPair(uint8_t* stage, const GemvParams& p, const uint8_t* w,
                                         int64_t o0, int64_t pair, int lane) {
  for (int i = lane; i < kMmaRowsM * kPieces; i += 32) {
    const int r = i / kPieces, c = i - r * kPieces;
    const int64_t row = o0 + r < p.out ? o0 + r : p.out - 1;
    CopyAsync16(stage + r * kPairBytes + 16 * c,
                w + row * p.w_row_bytes + pair * kPairBytes + 16 * c);
  }
}

// The 8 sub-blocks of block b, staged at `blk` (row r at r * kPairBytes), into acc, for the first
// `rows` activation columns (tiles of 8 past them are skipped).
template <int NT>
__device__ __forceinline__ void MmaBlock(const GemvParams& p, const uint8_t* blk, int64_t b, int g,
                                         int t, int rows, const uint32_t (&tbl)[4],
                                         const int (&x_row)[NT], const int (&d_row0)[NT],
                                         const int (&d_row1)[NT], float (&acc)[NT][4]) {
  const uint8_t* ra = blk + g * kPairBytes;
  const uint8_t* rb = blk + (g + 8) * kPairBytes;
  const Iq4SubScales sa(*reinterpret_cast<const uint2*>(ra));
  const Iq4SubScales sb(*reinterpret_cast<const uint2*>(rb));
  const int64_t blocks32 = p.in / 32;
  // Fully unrolled the compiler hoists every sub-block's activation loads: 4 tiles of them did not
  // fit the grouped kernel's register cap (spills), so that one unrolls by 2.
  constexpr int kUnroll = NT > 2 ? 2 : 8;
#pragma unroll kUnroll
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t qa = *reinterpret_cast<const uint32_t*>(ra + 8 + 16 * ib + 4 * t);
    const uint32_t qb = *reinterpret_cast<const uint32_t*>(rb + 8 + 16 * ib + 4 * t);
    const float dl_a = sa.Of(ib), dl_b = sb.Of(ib);
    const uint2 va = Lookup16Pairs(qa, tbl), vb = Lookup16Pairs(qb, tbl);
    const uint32_t a[4] = {va.x, vb.x, va.y, vb.y};
    const int64_t sub = 8 * b + ib;  // 32-value activation block
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      // rows >= 1, so tile 0 always runs: unpredicated in the 1-2 tile kernels (measured,
      // session 43); with 4 tiles it made the wide kernel 110 -> 138 registers and the grouped
      // one spill 40 bytes under its cap, so those keep the guard.
      if ((NT <= 2 && j == 0) || 8 * j < rows) {
        const uint2 x =
            __ldg(reinterpret_cast<const uint2*>(p.xq + x_row[j] * p.in + 32 * sub + 8 * t));
        const float d0 = __ldg(&p.xd[d_row0[j] * blocks32 + sub].x);
        const float d1 = __ldg(&p.xd[d_row1[j] * blocks32 + sub].x);
        MmaS8Scaled(a, x.x, x.y, dl_a, dl_b, d0, d1, acc[j]);
      }
    }
  }
}

// Dynamic shared memory of the kernels: the warps' rings, then their partial sums.
template <int kWarps, int NT>
constexpr size_t MmaSharedBytes() {
  return size_t{kWarps} * kStages * kStageBytes + size_t{kWarps} * NT * 32 * sizeof(float4);
}

// One warp's share of the K loop over the CTA's 16 rows of matrix `w`: pairs of blocks warp,
// warp + kWarps, ... through the warp's two-stage ring. IssueFirst copies the first stages (before
// the activations are needed, so the plain kernel can issue them ahead of its dependency wait);
// Run waits for each stage, multiplies it and refills it.
template <int kWarps>
struct WarpK {
  const GemvParams& p;
  const uint8_t* w;
  int64_t o0;
  uint8_t (*ring)[kStageBytes];  // this warp's kStages stages
  int warp, lane;
  int64_t nb, n_mine;

  __device__ __forceinline__ WarpK(const GemvParams& params, const uint8_t* matrix, int64_t row0,
                                   uint8_t (*warp_ring)[kStageBytes], int warp_index,
                                   int lane_index)
      : p(params), w(matrix), o0(row0), ring(warp_ring), warp(warp_index), lane(lane_index) {
    nb = p.in / 256;
    const int64_t pairs = (nb + 1) / 2;
    n_mine = warp < pairs ? (pairs - warp + kWarps - 1) / kWarps : 0;
  }
  __device__ __forceinline__ void Copy(int stage, int64_t k) const {
    const int64_t pair = warp + k * kWarps;
    if (2 * pair + 1 < nb) {
      CopyPair<17>(ring[stage], p, w, o0, pair, lane);
    } else {
      CopyPair<9>(ring[stage], p, w, o0, pair, lane);
    }
  }
  __device__ __forceinline__ void IssueFirst() const {
#pragma unroll
    for (int k = 0; k < kStages; ++k) {
      if (k < n_mine) Copy(k, k);
      CommitCopies();  // empty groups too: the wait below counts groups
    }
  }
  template <int NT>
  __device__ __forceinline__ void Run(int rows, const int (&x_row)[NT], const int (&d_row0)[NT],
                                      const int (&d_row1)[NT], float (&acc)[NT][4]) const {
    const int g = lane >> 2, t = lane & 3;
    const uint32_t tbl[4] = {p.iq4nl[0], p.iq4nl[1], p.iq4nl[2], p.iq4nl[3]};
    for (int64_t k = 0; k < n_mine; ++k) {
      const int stage = static_cast<int>(k % kStages);
      WaitCopiesButOne();  // groups 0..k have landed (kStages + k committed so far)
      __syncwarp();        // and every lane's pieces are visible to the warp
      const int64_t pair = warp + k * kWarps;
      const uint8_t* st = ring[stage];
      MmaBlock<NT>(p, st, 2 * pair, g, t, rows, tbl, x_row, d_row0, d_row1, acc);
      if (2 * pair + 1 < nb) {
        MmaBlock<NT>(p, st + kIq4Bytes, 2 * pair + 1, g, t, rows, tbl, x_row, d_row0, d_row1, acc);
      }
      __syncwarp();  // every lane is done with the stage before it is refilled
      if (k + kStages < n_mine) Copy(stage, k + kStages);
      CommitCopies();
    }
  }
};

// Adds the warps' partial sums through shared memory and hands each (output row o, activation
// column r, value) of the CTA's 16 rows to store(o, r, v); rows past p.out are dropped.
template <int kWarps, int NT, class Store>
__device__ __forceinline__ void ReduceAndStore(float4 (*partial)[NT][32], const GemvParams& p,
                                               int64_t o0, int warp, int lane,
                                               const float (&acc)[NT][4], Store store) {
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    partial[warp][j][lane] = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < NT * 32; i += blockDim.x) {
    const int j = i / 32, l = i % 32;
    float4 v = partial[0][j][l];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) {
      const float4 u = partial[w][j][l];
      v.x += u.x;
      v.y += u.y;
      v.z += u.z;
      v.w += u.w;
    }
    const int lg = l >> 2, lt = l & 3;
    const int r0 = 8 * j + 2 * lt, r1 = r0 + 1;  // activation columns of the results
    const int64_t oa = o0 + lg, ob = o0 + lg + 8;
    if (oa < p.out) {
      store(oa, r0, v.x);
      store(oa, r1, v.y);
    }
    if (ob < p.out) {
      store(ob, r0, v.z);
      store(ob, r1, v.w);
    }
  }
}

// The CTA's view of the dynamic shared memory (the warps' rings, then their partial sums), its
// 16 output rows and the thread's warp and lane.
template <int kWarps, int NT>
struct MmaCta {
  uint8_t (*ring)[kStages][kStageBytes];
  float4 (*partial)[NT][32];
  int warp, lane;
  int64_t o0;
  __device__ __forceinline__ explicit MmaCta(uint8_t* smem)
      : ring(reinterpret_cast<uint8_t (*)[kStages][kStageBytes]>(smem)),
        partial(
            reinterpret_cast<float4 (*)[NT][32]>(smem + size_t{kWarps} * kStages * kStageBytes)),
        warp(static_cast<int>(threadIdx.x >> 5)),
        lane(static_cast<int>(threadIdx.x & 31)),
        o0(static_cast<int64_t>(blockIdx.x) * kMmaRowsM) {}
};

// NT = activation-row tiles of 8 (rows <= 8 * NT); kWarps split K (pairs of blocks).
template <int kWarps, int NT>
__global__ void __launch_bounds__(32 * kWarps)
    GemvMmaIq4XsKernel(const __grid_constant__ GemvParams p) {
  extern __shared__ __align__(16) uint8_t mma_smem[];
  const MmaCta<kWarps, NT> cta(mma_smem);
  const int warp = cta.warp, lane = cta.lane, g = lane >> 2, t = lane & 3;
  const int64_t o0 = cta.o0;
  const WarpK<kWarps> k_loop(p, p.w, o0, cta.ring[warp], warp, lane);
  k_loop.IssueFirst();
  WaitForPrimaryGrid();  // the quantizer writing xq / xd may still run
  AllowDependentLaunch();

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
  k_loop.template Run<NT>(p.rows, x_row, d_row0, d_row1, acc);
  ReduceAndStore<kWarps, NT>(cta.partial, p, o0, warp, lane, acc, [&](int64_t o, int r, float v) {
    if (r < p.rows) p.y[r * p.y_stride + o] = v;
  });
}

// 17..GemvMmaWideMaxRows() rows (STEPSERVE_GEMV_MMA_WIDE): GemvMmaIq4XsKernel's single K loop
// over the CTA's 16 rows for up to 8 * NT = 32 activation rows, in the grouped kernel's shape (4
// warps) under a register cap of 3 CTAs per SM (the default since session 15). A kernel of its own
// so that the measured plain kernels keep their code. (8 tiles for 33-64 rows, 2 CTAs per SM,
// measured slower than F16 tiles + cuBLAS in session 16 and were removed: gemv_cuda_internal.h.)
template <int NT>
__global__ void __launch_bounds__(128, 3)
    GemvMmaIq4XsWideKernel(const __grid_constant__ GemvParams p) {
  constexpr int kWarps = 4;
  static_assert(NT == 4, "32 rows: kGemvMmaWideMaxRows");
  extern __shared__ __align__(16) uint8_t mma_smem[];
  const MmaCta<kWarps, NT> cta(mma_smem);
  const int warp = cta.warp, lane = cta.lane, g = lane >> 2, t = lane & 3;
  const WarpK<kWarps> k_loop(p, p.w, cta.o0, cta.ring[warp], warp, lane);
  k_loop.IssueFirst();
  WaitForPrimaryGrid();  // the quantizer writing xq / xd may still run
  AllowDependentLaunch();
  const int rows = p.rows;                // <= 8 * NT (LaunchGemvQ8xMma)
  int x_row[NT], d_row0[NT], d_row1[NT];  // clamped to the last row
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int last = rows - 1;
    x_row[j] = 8 * j + g < last ? 8 * j + g : last;
    d_row0[j] = 8 * j + 2 * t < last ? 8 * j + 2 * t : last;
    d_row1[j] = 8 * j + 2 * t + 1 < last ? 8 * j + 2 * t + 1 : last;
  }
  float acc[NT][4] = {};
  k_loop.template Run<NT>(rows, x_row, d_row0, d_row1, acc);
  ReduceAndStore<kWarps, NT>(cta.partial, p, cta.o0, warp, lane, acc,
                             [&](int64_t o, int r, float v) {
                               if (r < rows) p.y[r * p.y_stride + o] = v;
                             });
}

// Grouped mode (MoE with many tokens per expert, e.g. a prefill): grid (16-row tiles, slots).
// Slot s holds the groups that picked matrix slot_matrix[s] (GemvParams); the CTA runs them in
// chunks of 8 * NT activation rows, each a full K loop over its 16 rows of that matrix, so the
// weight tile is decoded once per 8 * NT groups (re-read from L2 after the first chunk) instead
// of once per 4 groups in the dp4a grouped kernel.
// At least 3 CTAs (12 warps) per SM: uncapped, the 4 activation tiles took 253 registers.
template <int kWarps, int NT>
__global__ void __launch_bounds__(32 * kWarps, 3)
    GemvMmaIq4XsGroupedKernel(const __grid_constant__ GemvParams p) {
  extern __shared__ __align__(16) uint8_t mma_smem[];
  const MmaCta<kWarps, NT> cta(mma_smem);
  const int warp = cta.warp, lane = cta.lane, g = lane >> 2, t = lane & 3;
  const int64_t o0 = cta.o0;
  const uint8_t* w = nullptr;
  int begin = 0, end = 0;
  if (!SlotGroups<kMmaRowsM>(p, o0, &w, &begin, &end)) return;
  const WarpK<kWarps> k_loop(p, w, o0, cta.ring[warp], warp, lane);
  for (int c0 = begin; c0 < end; c0 += 8 * NT) {
    k_loop.IssueFirst();
    const int rows = end - c0 < 8 * NT ? end - c0 : 8 * NT;
    const auto x_of = [&](int r) { return p.group_order[c0 + (r < rows ? r : rows - 1)]; };
    int x_row[NT], d_row0[NT], d_row1[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      x_row[j] = x_of(8 * j + g) / p.x_group_div;
      d_row0[j] = x_of(8 * j + 2 * t) / p.x_group_div;
      d_row1[j] = x_of(8 * j + 2 * t + 1) / p.x_group_div;
    }
    float acc[NT][4] = {};
    k_loop.template Run<NT>(rows, x_row, d_row0, d_row1, acc);
    ReduceAndStore<kWarps, NT>(cta.partial, p, o0, warp, lane, acc, [&](int64_t o, int r, float v) {
      if (r < rows) p.y[p.group_order[c0 + r] * p.y_stride + o] = v;
    });
    __syncthreads();  // the partial sums are read before the next chunk writes them
  }
}

// Output counts below this take the 8-warp kernel; by default every count (since session 45).
// STEPSERVE_GEMV_MMA_8WARP_OUT=N sets it (0: never 8 warps; 8192: the rule until session 45 -
// fewer than 8192 rows leave under ~4 CTAs of 4 warps per SM, so 8 warps there only). Why: session
// 43's 4-warp kernel measured slower than the base's on 12288 x 4096 at 12 / 16 rows, and 8 warps
// measured faster there (H100, session 45, bench/gpu/results-v39.txt, bench_gemv --rows):
// 12288 x 4096 at 8 / 12 / 16 rows 21.47 / 28.02 / 31.40 us -> 20.26 / 24.37 / 27.33 us (4096 x
// 12288 already took 8 warps); decode at 8 / 12 / 16 streams (24 layers) 6.421 / 8.226 / 9.654 ->
// 6.464 / 8.139 / 9.607 ms, one round (within ~1%). The fused q / k / gate projection of a
// sliding-window layer has 13408 rows, a full layer's 9280: both took 4 warps at 9-16 streams.
int64_t EightWarpOutFromEnv() {
  const char* v = std::getenv("STEPSERVE_GEMV_MMA_8WARP_OUT");
  if (v == nullptr || v[0] == '\0') return std::numeric_limits<int64_t>::max();
  const long long n = std::atoll(v);
  return n > 0 ? static_cast<int64_t>(n) : int64_t{0};
}

int MinRowsFromEnv() {
  const char* v = std::getenv("STEPSERVE_GEMV_MMA");
  if (v != nullptr && v[0] == '0') return kGemvMmaMaxRows + 1;  // never
  if (v != nullptr && v[0] == '2') return 2;                    // from 2 rows
  return kGemvMmaMinRows;
}

}  // namespace

namespace {

// Sets the kernel's shared-memory limit once per device, then launches.
enum class MmaForm { kPlain, kWide, kGrouped };
template <int kWarps, int NT, MmaForm kForm>
cudaError_t LaunchMma(bool overlap, dim3 grid, const GemvParams& p, cudaStream_t stream) {
  constexpr size_t kSmem = MmaSharedBytes<kWarps, NT>();
  void (*kernel)(const GemvParams);  // instantiates only the kernel asked for
  if constexpr (kForm == MmaForm::kGrouped) {
    kernel = GemvMmaIq4XsGroupedKernel<kWarps, NT>;
  } else if constexpr (kForm == MmaForm::kWide) {
    static_assert(kWarps == 4, "GemvMmaIq4XsWideKernel's shape");
    kernel = GemvMmaIq4XsWideKernel<NT>;
  } else {
    kernel = GemvMmaIq4XsKernel<kWarps, NT>;
  }
  static std::atomic<uint64_t> attribute_set{0};
  if (const cudaError_t err = SetDynamicSharedOnce(kernel, kSmem, attribute_set);
      err != cudaSuccess) {
    return err;
  }
  return LaunchOverlapping(overlap, kernel, grid, dim3(32 * kWarps), kSmem, stream, p);
}

}  // namespace

int GemvMmaMinRows() {
  static const int rows = MinRowsFromEnv();
  return rows;
}

std::atomic<int>& GemvMmaWideMaxRowsSetting() {
  static std::atomic<int> rows{[] {
    const char* v = std::getenv("STEPSERVE_GEMV_MMA_WIDE");
    return v != nullptr && v[0] == '0' ? kGemvMmaMaxRows : kGemvMmaWideMaxRows;
  }()};
  return rows;
}

int GemvMmaWideMaxRows() { return GemvMmaWideMaxRowsSetting().load(std::memory_order_relaxed); }

cudaError_t LaunchGemvQ8xMma(GgmlType type, const GemvParams& p, bool overlap_previous,
                             cudaStream_t stream) {
  if (type != GgmlType::kIQ4_XS || !p.x_pair_order || p.rows < 2 || p.rows > GemvMmaWideMaxRows() ||
      p.in % 256 != 0 || p.matrix_ids != nullptr || p.slot_matrix != nullptr) {
    return cudaErrorNotSupported;
  }
  const dim3 grid(static_cast<unsigned>((p.out + kMmaRowsM - 1) / kMmaRowsM));
  const bool overlap = overlap_previous || PdlEnabled();
  if (p.rows > kGemvMmaMaxRows) {
    static_assert(kGemvMmaWideMaxRows == 32, "4 tiles of 8 rows");
    return LaunchMma<4, 4, MmaForm::kWide>(overlap, grid, p, stream);
  }
  static_assert(kGemvMmaMaxRows == 16, "one instantiation per 8 activation rows");
  // 8 warps split K (EightWarpOutFromEnv), so each SM has enough warps to hide the MMA,
  // shared-memory and activation-load latencies.
  static const int64_t eight_warp_out = EightWarpOutFromEnv();
  const bool wide = p.out < eight_warp_out;
  if (wide) {
    return p.rows <= 8 ? LaunchMma<8, 1, MmaForm::kPlain>(overlap, grid, p, stream)
                       : LaunchMma<8, 2, MmaForm::kPlain>(overlap, grid, p, stream);
  }
  return p.rows <= 8 ? LaunchMma<4, 1, MmaForm::kPlain>(overlap, grid, p, stream)
                     : LaunchMma<4, 2, MmaForm::kPlain>(overlap, grid, p, stream);
}

cudaError_t LaunchGemvQ8xMmaGrouped(GgmlType type, const GemvParams& p, int64_t slots,
                                    cudaStream_t stream) {
  if (type != GgmlType::kIQ4_XS || !p.x_pair_order || p.in % 256 != 0 || p.slot_matrix == nullptr ||
      p.slot_begin == nullptr || p.group_order == nullptr || slots < 1 || slots > 65535 ||
      GemvMmaMinRows() > kGemvMmaMaxRows) {
    return cudaErrorNotSupported;
  }
  const dim3 grid(static_cast<unsigned>((p.out + kMmaRowsM - 1) / kMmaRowsM),
                  static_cast<unsigned>(slots));
  // 32 activation rows per chunk: a prefill's experts see ~60 (2048 tokens, 8 of 288 experts).
  return LaunchMma<4, 4, MmaForm::kGrouped>(/*overlap=*/PdlEnabled(), grid, p, stream);
}

}  // namespace stepserve::kernels::gemv_internal
