// The grouped F16 GEMM of a prefill's IQ4_XS experts (gemm_grouped_f16_cuda.cu) on the Hopper
// warpgroup MMA (wgmma.mma_async, sm_90a) instead of mma.sync: STEPSERVE_GEMM_F16_WGMMA=1 (8
// warps) or 2 (12 warps), read once; off. Measured on the H100 (session 29, results-v26.txt; 24
// layers): correct (the MoE GEMV test's cases), prefill 2048 tokens 17.5k tok/s by default, 16.3k
// with `1`, 17.6k with `2` - the decode, not the MMA, limits both kernels (docs/cuda-engine.md).
//
// Why: in the mma.sync kernel every warp reads its B fragments (the activations) from shared
// memory for each 16 x 8 x 16 MMA itself - 256 bytes per MMA, the 8 warps each reading the whole
// chunk - and one CTA per SM of 8 warps leaves 2 per scheduler to hide the decode's latency
// (session 25's gate launch: 69.1M HMMAs in 1.22 ms, ~4 SM cycles each; stalls on the math pipe,
// shared-memory and fixed-latency chains). wgmma reads B from shared memory itself, once per
// warpgroup of 4 warps (64 rows) and instruction, asynchronously: the warps decode the next
// sub-block's weights while the tensor cores multiply the last, and no register holds B.
//
// Shape: as the wide mma.sync kernel - 128 weight rows per CTA (8 warps: two warpgroups of 64
// rows; 12 warps: three, 192 rows), each warp decoding its 16 into the A fragments of the
// register-A wgmma form, which are mma.m16n8k16's), chunks of 128 pairs (N = 128; narrow last
// chunks N = 16 / 32 / 64 / 96), K in 256-value blocks, two stages of cp.async copies in flight. B
// (the chunk's activations) is staged in wgmma's canonical K-major layout without swizzle: 8 x 8
// "core matrices" (8 pairs x 8 F16, 128 contiguous bytes), those of one block's 32 K-groups of 8
// values 128 bytes apart (the descriptor's leading-dimension offset), groups of 8 pairs 4096 bytes
// apart (its stride offset).
//
// Activation order (the ConvertActivationsWgmmaKernel below writes xh in it): wgmma multiplies
// A's k-th column with B's k-th row in logical order, while the IQ4_XS decoder yields lane t's
// weights in the pair order of its 16-byte chunk t of a 32-value sub-block (E_t[0..7] = elements
// 4t, 16+4t, 4t+1, 16+4t+1, ..). The A fragment puts E_t[0..1] at logical k 2t, 2t+1 and E_t[2..3]
// at 2t+8, 2t+9 of the sub-block's first k16 (E_t[4..7] likewise in its second), so B's row k
// must hold the matching element: 16-byte chunk j of the sub-block (logical k 8j..8j+7 of it) is
// {E_t[2j], E_t[2j+1]} for t = 0..3, i.e. elements {4t + j, 16 + 4t + j} - a 4 x 4 transpose of
// the pair order's 32-bit words, so every 16-byte chunk of xh is one row of a core matrix.
#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "kernels/common/dynamic_smem.h"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/matmul/gemv_block_util.cuh"
#include "kernels/matmul/gemv_cuda_internal.h"
#include "kernels/matmul/mma_iq4_util.cuh"

namespace stepserve::kernels::gemv_internal {
namespace {

#include "kernels/matmul/gemv_q8x_pieces.cuh"
#include "kernels/matmul/gemv_q8x_pieces_low_bit.cuh"
// (after the pieces: the IQ4_XS decoder uses Lookup16Pairs)
#include "kernels/matmul/gemm_f16_decoders.cuh"
#include "kernels/matmul/wgmma_f16_rs.cuh"

constexpr int kPairs = 128;  // activation rows (pairs) per chunk: wgmma's N
constexpr int kStages = 2;
constexpr int kCoreBytes = 128;                           // one core matrix: 8 pairs x 8 F16
constexpr int kGroupBytes = 32 * kCoreBytes;              // 8 pairs x one 256-value block
constexpr int kActStageBytes = kPairs / 8 * kGroupBytes;  // 64 KB

// kWarps: 8 (two warpgroups, 128 weight rows per CTA) or 12 (three, 192 rows).
template <class D, int kWarps>
struct WgmmaLayout {
  static constexpr int kTileRows = 16 * kWarps;
  static constexpr int kWeightStageBytes = kTileRows * D::kStride;
  static constexpr int kStageBytes = kWeightStageBytes + kActStageBytes;
  static constexpr size_t kSmemBytes = size_t{kStages} * kStageBytes + kPairs * sizeof(int);
  static_assert(kWeightStageBytes % 128 == 0, "activation stages stay 128-byte aligned");
  static_assert(kSmemBytes <= 227 * 1024, "one CTA per SM");
};

// One thread's share of a stage's copies, set up once per chunk. Weights as in the mma.sync
// kernel (D::kPieces threads per row, rows past `out` not copied). Activations: lane l copies
// 16-byte chunks c = l / 8 + 4 m (m = 0..7) of pair 8 (warp + 8 i) + l % 8 (i = 0, 1): a quarter
// warp's 8 stores are one core-matrix column (128 bytes, all banks), and its loads 8 rows of 16
// bytes whose neighbours the next quarters read. Pairs past the chunk's `cols` are not copied
// (a wgmma column depends on its own B column only; those are dropped).
struct WgmmaCopyPlan {
  const uint8_t* w_src;
  int w_piece, w_dst, w_rows;
  int64_t w_pass_bytes;
  const uint8_t* x_src[2];
  int x_dst[2];
  bool x_on[2];
};

template <class D, int kWarps>
__device__ __forceinline__ WgmmaCopyPlan MakeWgmmaCopyPlan(const GemvParams& p, const uint8_t* w,
                                                           int64_t o0, int cols,
                                                           const int* pair_row) {
  constexpr int kRowsPerPass = 32 * kWarps / D::kPieces;
  constexpr int kTileRows = WgmmaLayout<D, kWarps>::kTileRows;
  WgmmaCopyPlan c;
  const int tid = static_cast<int>(threadIdx.x);
  const int r0 = tid / D::kPieces, piece = tid - D::kPieces * r0;
  const int64_t valid = p.out - o0 < kTileRows ? p.out - o0 : kTileRows;
  c.w_rows =
      r0 < kRowsPerPass && r0 < valid ? static_cast<int>((valid - 1 - r0) / kRowsPerPass) + 1 : 0;
  c.w_src = w + (o0 + r0) * p.w_row_bytes + D::kPieceBytes * piece;
  c.w_piece = piece;
  c.w_dst = r0 * D::kStride + D::kPieceBytes * piece;
  c.w_pass_bytes = kRowsPerPass * p.w_row_bytes;
  const int lane = tid & 31, warp = tid >> 5;
  const int quarter = lane >> 3, r8 = lane & 7;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    // (12 warps: the second pass covers groups 12-15 with warps 0-3 only.)
    const int group = warp + kWarps * i < kPairs / 8 ? warp + kWarps * i : kPairs / 8 - 1;
    const int n = 8 * group + r8;
    c.x_src[i] = reinterpret_cast<const uint8_t*>(p.xh) +
                 static_cast<int64_t>(pair_row[n]) * p.in * 2 + 16 * quarter;
    c.x_dst[i] = WgmmaLayout<D, kWarps>::kWeightStageBytes + group * kGroupBytes +
                 quarter * kCoreBytes + 16 * r8;
    c.x_on[i] = warp + kWarps * i < kPairs / 8 && n < cols;
  }
  return c;
}

template <class D, int kWarps>
__device__ __forceinline__ void CopyWgmmaStage(uint8_t* stage, const WgmmaCopyPlan& c, int64_t kb) {
  constexpr int kRowsPerPass = 32 * kWarps / D::kPieces;
  const uint8_t* ws = c.w_src + kb * D::kBlockBytes;
  uint8_t* wd = stage + c.w_dst;
  for (int m = 0; m < c.w_rows; ++m) {
    if constexpr (D::kPieceBytes == 8) {
      CopyAsync8(wd, D::CopySource(ws, c.w_piece));
    } else {
      CopyAsync16(wd, D::CopySource(ws, c.w_piece));
    }
    ws += c.w_pass_bytes;
    wd += kRowsPerPass * D::kStride;
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (c.x_on[i]) {
      const uint8_t* xs = c.x_src[i] + kb * 512;
      uint8_t* xd = stage + c.x_dst[i];
#pragma unroll
      for (int m = 0; m < 8; ++m) CopyAsync16(xd + 4 * kCoreBytes * m, xs + 64 * m);
    }
  }
}

// The shared-memory matrix descriptor of B for k16 step s of a staged block (K-major, no
// swizzle): start address, leading-dimension offset (K: the next 8 values' core matrix, 128
// bytes on), stride offset (N: the next 8 pairs, kGroupBytes on), each in 16-byte units.
__device__ __forceinline__ uint64_t BDescriptor(const uint8_t* act_stage, int s) {
  const uint32_t start = SharedAddress(act_stage + 2 * kCoreBytes * s);
  return static_cast<uint64_t>((start >> 4) & 0x3FFFu) |
         (static_cast<uint64_t>(kCoreBytes >> 4) << 16) |
         (static_cast<uint64_t>(kGroupBytes >> 4) << 32);
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int kInFlight>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kInFlight) : "memory");
}
// Makes this thread's generic-proxy shared-memory writes (the cp.async copies, once landed)
// visible to the async proxy wgmma reads B through.
__device__ __forceinline__ void FenceProxyAsyncShared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// The staged block: the warp's 16 rows decoded per sub-block into two A fragments, each the A of
// one wgmma over the first 8 kTiles pairs of the chunk.
template <class D, int kWarps, int kTiles>
__device__ __forceinline__ void WgmmaStagedBlock(const uint8_t* stage, int warp, int g, int t,
                                                 int shift, const F16DecodeTables& tbl,
                                                 float (&acc)[kPairs / 8][4]) {
  const uint8_t* ra = stage + (16 * warp + g) * D::kStride;
  const uint8_t* act = stage + WgmmaLayout<D, kWarps>::kWeightStageBytes;
  const typename D::Row row_a = D::Begin(ra, shift, t);
  const typename D::Row row_b = D::Begin(ra + 8 * D::kStride, shift, t);
#pragma unroll
  for (int ib = 0; ib < 8; ++ib) {
    const typename D::Sub sa = D::Decode(row_a, ib, t, tbl), sb = D::Decode(row_b, ib, t, tbl);
    const uint32_t a_lo[4] = {
        D::Halves(sa, sa.words.x, 0x4140u), D::Halves(sb, sb.words.x, 0x4140u),
        D::Halves(sa, sa.words.x, 0x4342u), D::Halves(sb, sb.words.x, 0x4342u)};
    const uint32_t a_hi[4] = {
        D::Halves(sa, sa.words.y, 0x4140u), D::Halves(sb, sb.words.y, 0x4140u),
        D::Halves(sa, sa.words.y, 0x4342u), D::Halves(sb, sb.words.y, 0x4342u)};
    WgmmaFence();  // the A registers were just written
    WgmmaF16Rs<8 * kTiles>::Run(acc, a_lo, BDescriptor(act, 2 * ib));
    WgmmaF16Rs<8 * kTiles>::Run(acc, a_hi, BDescriptor(act, 2 * ib + 1));
    WgmmaCommit();
  }
}

template <class D, int kWarps, int kTiles>
__device__ __forceinline__ void WgmmaChunkProducts(uint8_t* smem, const WgmmaCopyPlan& plan,
                                                   int64_t nb, const uint8_t* w_row_a, int warp,
                                                   int g, int t, const F16DecodeTables& tbl,
                                                   float (&acc)[kPairs / 8][4]) {
  constexpr int kStageBytes = WgmmaLayout<D, kWarps>::kStageBytes;
  for (int64_t kb = 0; kb < nb; ++kb) {
    uint8_t* stage = smem + static_cast<int>(kb % kStages) * kStageBytes;
    WaitCopiesButOne();       // this thread's copies of block kb have landed
    FenceProxyAsyncShared();  // visible to wgmma's reads
    __syncthreads();          // and everyone's
    const int shift = D::Shift(w_row_a + kb * D::kBlockBytes);
    WgmmaStagedBlock<D, kWarps, kTiles>(stage, warp, g, t, shift, tbl, acc);
    WgmmaWait<0>();   // the warpgroup's MMAs reading the stage are done
    __syncthreads();  // every warp's, before the stage is refilled
    if (kb + kStages < nb) CopyWgmmaStage<D, kWarps>(stage, plan, kb + kStages);
    CommitCopies();
  }
}

// Grid (128-row tiles, slots); a slot's groups in chunks of 128 pairs, the last one through the
// narrowest N of 16 / 32 / 64 / 96 / 128 holding its columns.
template <class D, int kWarps>
__global__ void __launch_bounds__(32 * kWarps, 1)
    GemmF16WgmmaKernel(const __grid_constant__ GemvParams p) {
  extern __shared__ __align__(128) uint8_t wgmma_smem[];
  constexpr int kStageBytes = WgmmaLayout<D, kWarps>::kStageBytes;
  constexpr int kTileRows = WgmmaLayout<D, kWarps>::kTileRows;
  int* pair_row = reinterpret_cast<int*>(wgmma_smem + size_t{kStages} * kStageBytes);
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int g = lane >> 2, t = lane & 3;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kTileRows;
  const uint8_t* w = nullptr;
  int begin = 0, end = 0;
  if (!SlotGroups<kTileRows>(p, o0, &w, &begin, &end)) return;
  const int64_t nb = p.in / 256;
  const uint8_t* w_row_a = w + (o0 + 16 * warp + g) * p.w_row_bytes;
  const F16DecodeTables tbl = DecodeTablesOf(p);
  for (int c0 = begin; c0 < end; c0 += kPairs) {
    const int cols = end - c0 < kPairs ? end - c0 : kPairs;
    __syncthreads();  // the previous chunk is done with pair_row and the stages
    LoadPairRows<kPairs>(p, c0, cols, pair_row);
    const WgmmaCopyPlan plan = MakeWgmmaCopyPlan<D, kWarps>(p, w, o0, cols, pair_row);
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      if (s < nb) CopyWgmmaStage<D, kWarps>(wgmma_smem + s * kStageBytes, plan, s);
      CommitCopies();
    }
    float acc[kPairs / 8][4] = {};
    if (cols <= 16) {
      WgmmaChunkProducts<D, kWarps, 2>(wgmma_smem, plan, nb, w_row_a, warp, g, t, tbl, acc);
    } else if (cols <= 32) {
      WgmmaChunkProducts<D, kWarps, 4>(wgmma_smem, plan, nb, w_row_a, warp, g, t, tbl, acc);
    } else if (cols <= 64) {
      WgmmaChunkProducts<D, kWarps, 8>(wgmma_smem, plan, nb, w_row_a, warp, g, t, tbl, acc);
    } else if (cols <= 96) {
      WgmmaChunkProducts<D, kWarps, 12>(wgmma_smem, plan, nb, w_row_a, warp, g, t, tbl, acc);
    } else {
      WgmmaChunkProducts<D, kWarps, 16>(wgmma_smem, plan, nb, w_row_a, warp, g, t, tbl, acc);
    }
    StoreGroupedTile(p, o0 + 16 * warp + g, c0, cols, t, acc);
  }
}

// F32 rows -> F16 in the order above, one thread per 32-value sub-block (8 float4 loads, four
// 16-byte stores); values beyond the F16 range saturate at +-65504 (as
// ConvertActivationsF16Kernel).
__global__ void __launch_bounds__(256)
    ConvertActivationsWgmmaKernel(const __grid_constant__ GemvParams p, uint16_t* xh) {
  AllowDependentLaunch();
  WaitForPrimaryGrid();  // the kernel writing x (launched before this one) has finished
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t per_row = p.in / 32;
  if (i >= per_row * p.rows) return;
  const int64_t r = i / per_row, s = i - r * per_row;
  const float* x = p.x + r * p.x_stride + 32 * s;
  float v[32];
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const float4 f = __ldg(reinterpret_cast<const float4*>(x + 4 * q));
    v[4 * q] = f.x;
    v[4 * q + 1] = f.y;
    v[4 * q + 2] = f.z;
    v[4 * q + 3] = f.w;
  }
  uint4* out = reinterpret_cast<uint4*>(xh + r * p.in + 32 * s);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    uint32_t w[4];
#pragma unroll
    for (int t = 0; t < 4; ++t) w[t] = SaturatedF16Pair(v[4 * t + j], v[16 + 4 * t + j]);
    out[j] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// The IQ4_XS kernel with kWarps warps (kTileRows weight rows per CTA); its shared-memory
// attribute set once per device (LaunchGroupedTiles).
template <int kWarps>
cudaError_t LaunchWgmmaWarps(const GemvParams& p, int64_t slots, cudaStream_t stream) {
  using Layout = WgmmaLayout<Iq4XsF16Decoder, kWarps>;
  static std::atomic<uint64_t> attribute_set{0};
  return LaunchGroupedTiles(GemmF16WgmmaKernel<Iq4XsF16Decoder, kWarps>, Layout::kTileRows,
                            32 * kWarps, Layout::kSmemBytes, attribute_set, p, slots, stream);
}

}  // namespace

// STEPSERVE_GEMM_F16_WGMMA (read once): 0 / unset off, 1 the 8-warp kernel, 2 the 12-warp one.
int GemmF16WgmmaLevel() {
  static const int level = EnvSwitchLevel("STEPSERVE_GEMM_F16_WGMMA", 0);
  return level;
}

bool GemmF16WgmmaOn() { return GemmF16WgmmaLevel() > 0; }

bool GemmF16WgmmaOrder(const GemvParams& p) {
  return GemmF16WgmmaOn() && p.x_pair_order && p.in % 256 == 0;
}

cudaError_t LaunchConvertActivationsWgmma(const GemvParams& p, uint16_t* xh, cudaStream_t stream) {
  const int64_t threads = p.in / 32 * p.rows;
  return LaunchWithPdl(ConvertActivationsWgmmaKernel,
                       dim3(static_cast<unsigned>((threads + 255) / 256)), dim3(256), 0, stream, p,
                       xh);
}

cudaError_t LaunchGemmF16Wgmma(GgmlType type, const GemvParams& p, int64_t slots,
                               cudaStream_t stream) {
  if (type != GgmlType::kIQ4_XS || !GemmF16WgmmaOrder(p)) return cudaErrorNotSupported;
  return GemmF16WgmmaLevel() >= 2 ? LaunchWgmmaWarps<12>(p, slots, stream)
                                  : LaunchWgmmaWarps<8>(p, slots, stream);
}

}  // namespace stepserve::kernels::gemv_internal
