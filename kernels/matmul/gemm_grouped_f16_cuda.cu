// Grouped tensor-core GEMM of a prefill's MoE experts with F16 operands: IQ4_XS, Q4_K or Q6_K
// (and, for the published files' 2-3 bit experts, IQ3_S, IQ3_XXS, IQ2_XXS, IQ2_XS, IQ2_S, Q2_K,
// Q3_K: gemm_f16_decoders_grid.cuh; host-emulated, then its GPU tests passed on the H200 in
// session 20 - Step-5 shapes' prefill 3427 -> 15119 tok/s) weights decoded to F16 with
// their sub-block scale (and min) folded in (gemm_f16_decoders.cuh), times F16 activations, F32
// accumulation (mma.sync m16n8k16). GemvParams grouped mode, like gemm_grouped_mma_cuda.cu; the
// default for many groups per matrix on IQ4_XS, Q4_K and Q6_K (STEPSERVE_GROUPED_GEMM_F16=0 keeps
// the int8 kernel, which decodes IQ4_XS only; =1 takes the F16 form for IQ4_XS only; =2 for IQ4_XS
// and Q4_K).
//
// Why: the int8 grouped GEMM ran 2.37 ms (gate, up) and 2.42 ms (down) per projection at a
// 2048-token prefill (ncu, H200: 16384 pairs x 4096 x 1280 in 2.4 ms = 72 int8 TOPS, 7.2 of a
// MoE layer's ~9.3 ms). Both of its operands carry a scale per 32 values, so every 16x8x32 MMA
// costs ~14 instructions of scaling (two scale loads, four int -> float conversions, two scale
// products, four FMAs). Here the weight scale is folded into the F16 weights and the activations
// need none, so an MMA costs only its operand load; the F16 decode (table lookup, byte permute,
// subtract, scale) is paid once per warp and 64 columns: in the IQ4_XS loop's SASS 232 of its
// 346 instructions per 4 sub-blocks (PRMT 88, LOP3 44, HADD2 32, HMUL2 32, SHF 28, SEL 8), ~3.6
// per weight - as many as the loop's 64 HMMAs (session 25).
//
// Tile: 128 weight rows (16 per warp, 8 warps) x 64 pairs; K in blocks (256), two stages in
// flight (cp.async pieces of the decoder's size, rows padded so the 8 rows one fragment load reads
// fall in distinct banks; activation rows 576 bytes apart, so a quarter warp's 16-byte loads of
// two rows fill the 32 banks). Two CTAs per SM (~108-112 KB shared each) for IQ4_XS and Q4_K;
// one for Q6_K (224-byte staged rows: 2 x (128 x 224 + 64 x 576) + 256 = 131328 bytes, 72 KB of
// it the activation stages). Rows past `out` are never copied or stored. Wide chunks
// (STEPSERVE_GEMM_F16_WIDE: IQ4_XS by default, also Q4_K and Q6_K at 2): 128 pairs, one CTA per
// SM (184832 / 188928 / 205312 bytes; 190-201 registers, no spills).
//
// Fragment mapping: lane t's 16-byte chunk t of a sub-block's activations holds the 8 elements
// whose weights the decoder yields for lane t, in the same order: for IQ4_XS the activations are
// stored in the pair order of the int8 path (Q8ScratchPosition: element 4i + j at 8i + 2j,
// 16 + 4i + j at 8i + 2j + 1 of each 32-value block), the order Lookup16Pairs yields weights from
// byte word t of the sub-block's qs; for Q4_K and Q6_K in natural order (elements 8t..8t+7 are
// bytes 8t..8t+7 of the sub-block's nibbles, for Q6_K also of its high-bit bytes). Halves 0-3
// feed the first m16n8k16 (logical k 2t, 2t+1, 2t+8, 2t+9), halves 4-7 the second. The logical
// order of k inside an MMA does not matter as long as A and B agree, which they do lane by lane.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "kernels/common/dynamic_smem.h"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/matmul/gemv_block_util.cuh"
#include "kernels/matmul/gemv_cuda_internal.h"
#include "kernels/matmul/matmul_cuda.h"
#include "kernels/matmul/mma_iq4_util.cuh"

namespace stepserve::kernels::gemv_internal {
namespace {

#include "kernels/matmul/gemv_q8x_pieces.cuh"
#include "kernels/matmul/gemv_q8x_pieces_low_bit.cuh"
// (after the pieces: the IQ4_XS decoder uses Lookup16Pairs, the grid decoders ApplySigns8)
#include "kernels/matmul/gemm_f16_decoders.cuh"
#include "kernels/matmul/gemm_f16_decoders_grid.cuh"

constexpr int kWarps = 8;
constexpr int kTileRows = 16 * kWarps;  // weight (output) rows per CTA, 16 per warp
constexpr int kStages = 2;
// Sub-blocks unrolled per step of the decode loop: all 8 spill (128 registers, the cap of two
// CTAs per SM); 4 fit in 120.
constexpr int kUnrollIb = 4;
constexpr int kActStride = 512 + 64;  // 256 F16 + 64 bytes: rows 64 bytes apart mod 128
// Activation rows (token, slot pairs) per chunk, kPairs: 64 (two CTAs per SM), or 128 - the wide
// chunks of STEPSERVE_GEMM_F16_WIDE (WideChunksSetting; one CTA per SM: 64 accumulators per thread,
// 185-206 KB of shared memory), which decode an expert's weights once for up to 128 pairs instead
// of twice past 64. A stage: the weight rows (D::kStride bytes each), then the activation rows.
template <class D, int kPairs>
struct Layout {
  static constexpr int kColTiles = kPairs / 8;
  static constexpr int kActStageBytes = kPairs * kActStride;
  static constexpr int kWeightStageBytes = kTileRows * D::kStride;
  static constexpr int kStageBytes = kWeightStageBytes + kActStageBytes;
  static constexpr size_t kSmemBytes = size_t{kStages} * kStageBytes + kPairs * sizeof(int);
  static_assert(kStageBytes % 16 == 0, "stages must stay 16-byte aligned");
  static_assert(D::kStride % 16 == 0, "staged rows stay 16-byte aligned");
  static_assert(D::kPieces * D::kPieceBytes >= D::kMaxShift + D::kBlockBytes &&
                    D::kPieces * D::kPieceBytes <= D::kStride,
                "the pieces cover a block at any shift and fit a staged row");
};

// One thread's share of every stage copy of a chunk, set up once per chunk so that a copy costs a
// pointer increment (the session-9 profile of the first version: the copy loops' index math was
// ~1/4 of all instructions). Weights: D::kPieces threads per row, one piece each (IQ4_XS: 17 of
// 8 bytes, 15 rows per pass; Q4_K: 9 of 16 bytes, 28 rows per pass; Q6_K: 14 of 16 bytes, 18
// rows per pass), so a warp's copies cover whole rows (coalesced; a row's pieces land in
// consecutive banks); rows past `out` are not copied (their stale products are dropped).
// Activations: four threads per row (rows rx, rx + 64 for 128 pairs), 16-byte pieces q, q + 4,
// .. (8 of 32), so at each step the four threads of a row read 64 contiguous bytes; rows past the
// chunk's `cols` are not copied either (an MMA column depends on its own B column only, and those
// are dropped).
constexpr int kActRowsPerPass = 32 * kWarps / 4;
template <int kPairs>
struct CopyPlan {
  static constexpr int kXRows = kPairs / kActRowsPerPass;  // activation rows per thread
  const uint8_t* w_src;          // the thread's piece of block 0 of its first weight row
  int w_piece;                   // which piece of a block that is (D::CopySource)
  const uint8_t* x_src[kXRows];  // the thread's first piece of element 0 of its activation rows
  int w_dst, x_dst[kXRows];      // offsets within a stage
  int w_rows;  // rows of the thread's weight passes (0 for threads past the last row)
  bool x_on[kXRows];
  int64_t w_pass_bytes;  // one pass of rows of global weights
};
static_assert(64 == kActRowsPerPass, "the copy plan maps 4 threads per activation row");

template <class D, int kPairs>
__device__ __forceinline__ CopyPlan<kPairs> MakeCopyPlan(const GemvParams& p, const uint8_t* w,
                                                         int64_t o0, int cols,
                                                         const int* pair_row) {
  constexpr int kRowsPerPass = 32 * kWarps / D::kPieces;
  CopyPlan<kPairs> c;
  const int tid = static_cast<int>(threadIdx.x);
  const int r0 = tid / D::kPieces, piece = tid - D::kPieces * r0;
  const int64_t valid = p.out - o0 < kTileRows ? p.out - o0 : kTileRows;  // rows inside `out`
  c.w_rows =
      r0 < kRowsPerPass && r0 < valid ? static_cast<int>((valid - 1 - r0) / kRowsPerPass) + 1 : 0;
  c.w_src = w + (o0 + r0) * p.w_row_bytes + D::kPieceBytes * piece;
  c.w_piece = piece;
  c.w_dst = r0 * D::kStride + D::kPieceBytes * piece;
  c.w_pass_bytes = kRowsPerPass * p.w_row_bytes;
  const int q = tid & 3;
#pragma unroll
  for (int i = 0; i < CopyPlan<kPairs>::kXRows; ++i) {
    const int rx = (tid >> 2) + kActRowsPerPass * i;
    c.x_src[i] = reinterpret_cast<const uint8_t*>(p.xh) +
                 static_cast<int64_t>(pair_row[rx]) * p.in * 2 + 16 * q;
    c.x_dst[i] = Layout<D, kPairs>::kWeightStageBytes + rx * kActStride + 16 * q;
    c.x_on[i] = rx < cols;
  }
  return c;
}

// Block kb of the chunk's weight rows and activation rows into `stage`.
template <class D, int kPairs>
__device__ __forceinline__ void CopyStage(uint8_t* stage, const CopyPlan<kPairs>& c, int64_t kb) {
  constexpr int kRowsPerPass = 32 * kWarps / D::kPieces;
  const uint8_t* ws = c.w_src + kb * D::kBlockBytes;
  uint8_t* wd = stage + c.w_dst;
  for (int m = 0; m < c.w_rows; ++m) {
    // Q6_K: the piece's source rounded down per row and block (the rounding is not the same for
    // every block or, in general, every row: no constant increment), D::CopySource.
    if constexpr (D::kPieceBytes == 8) {
      CopyAsync8(wd, D::CopySource(ws, c.w_piece));
    } else {
      CopyAsync16(wd, D::CopySource(ws, c.w_piece));
    }
    ws += c.w_pass_bytes;
    wd += kRowsPerPass * D::kStride;
  }
#pragma unroll
  for (int i = 0; i < CopyPlan<kPairs>::kXRows; ++i) {
    if (c.x_on[i]) {
      const uint8_t* xs = c.x_src[i] + kb * 512;
      uint8_t* xd = stage + c.x_dst[i];
#pragma unroll
      for (int m = 0; m < 8; ++m) CopyAsync16(xd + 64 * m, xs + 64 * m);
    }
  }
}

// The staged block: the warp's 16 rows x the first kTiles of the chunk's column tiles (8 columns
// each), into acc. shift: where the block starts in the staged rows g and g + 8 (D::Shift; 0 but
// for Q6_K).
template <class D, int kPairs, int kTiles, int kUnroll>
__device__ __forceinline__ void MmaStagedBlock(const uint8_t* stage, int warp, int g, int t,
                                               int shift, const F16DecodeTables& tbl,
                                               float (&acc)[kPairs / 8][4]) {
  const uint8_t* ra = stage + (16 * warp + g) * D::kStride;
  const uint8_t* act = stage + Layout<D, kPairs>::kWeightStageBytes + g * kActStride + 16 * t;
  const typename D::Row row_a = D::Begin(ra, shift, t);
  const typename D::Row row_b = D::Begin(ra + 8 * D::kStride, shift, t);
#pragma unroll kUnroll
  for (int ib = 0; ib < 8; ++ib) {
    const typename D::Sub sa = D::Decode(row_a, ib, t, tbl), sb = D::Decode(row_b, ib, t, tbl);
    // a0 / a2: row g, a1 / a3: row g + 8 (mma.m16n8k16 A fragment order).
    const uint32_t a_lo[4] = {
        D::Halves(sa, sa.words.x, 0x4140u), D::Halves(sb, sb.words.x, 0x4140u),
        D::Halves(sa, sa.words.x, 0x4342u), D::Halves(sb, sb.words.x, 0x4342u)};
    const uint32_t a_hi[4] = {
        D::Halves(sa, sa.words.y, 0x4140u), D::Halves(sb, sb.words.y, 0x4140u),
        D::Halves(sa, sa.words.y, 0x4342u), D::Halves(sb, sb.words.y, 0x4342u)};
    // All kTiles column tiles, also past the chunk's columns: a branch per tile split the loop
    // into basic blocks the compiler could not schedule across (the first version's profile).
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      // Column g of tile j = staged row 8j + g; chunk t of sub-block ib.
      const uint4 x = *reinterpret_cast<const uint4*>(act + 8 * j * kActStride + 64 * ib);
      MmaF16(a_lo, x.x, x.y, acc[j]);
      MmaF16(a_hi, x.z, x.w, acc[j]);
    }
  }
}

// One chunk's products over all of K: the two-stage copy pipeline of the weight and activation
// blocks and, per block, MmaStagedBlock over the first kTiles column tiles.
template <class D, int kPairs, int kTiles, int kUnroll>
__device__ __forceinline__ void ChunkProducts(uint8_t* smem, const CopyPlan<kPairs>& plan,
                                              int64_t nb, const uint8_t* w_row_a, int warp, int g,
                                              int t, const F16DecodeTables& tbl,
                                              float (&acc)[kPairs / 8][4]) {
  constexpr int kStageBytes = Layout<D, kPairs>::kStageBytes;
  for (int64_t kb = 0; kb < nb; ++kb) {
    uint8_t* stage = smem + static_cast<int>(kb % kStages) * kStageBytes;
    WaitCopiesButOne();  // this thread's copies of block kb have landed
    __syncthreads();     // and everyone's
    // Rows g and g + 8 share it: they lie 8 * w_row_bytes apart, a multiple of 16 (Q6_K rows
    // are 210 bytes per block: even).
    const int shift = D::Shift(w_row_a + kb * D::kBlockBytes);
    MmaStagedBlock<D, kPairs, kTiles, kUnroll>(stage, warp, g, t, shift, tbl, acc);
    __syncthreads();  // every warp is done with the stage before it is refilled
    if (kb + kStages < nb) CopyStage<D, kPairs>(stage, plan, kb + kStages);
    CommitCopies();
  }
}

// Grid (128-row tiles, slots). A slot's groups run in chunks of kPairs. The last chunk's missing
// columns are computed and dropped, unless kNarrowTails: then a chunk of at most 16 / 32 columns
// computes only 2 / 4 of the 8 column tiles (the default; STEPSERVE_GEMM_F16_NARROW_TAILS), and a
// wide one (128 pairs) also 8 / 12 of its 16 up to 64 / 96. Why: at a 2048-token prefill (16384
// pairs over 288 experts, ~57 each) ncu counted 69.1M executed HMMAs in a gate launch where its
// 18432 columns need 47.2M (H100, session 25): about 1.35 chunks per expert, the second mostly
// padding. The weights are still decoded for a narrow chunk (hence the wide chunks).
template <class D, bool kNarrowTails, int kPairs, int kUnroll>
__global__ void __launch_bounds__(32 * kWarps, kPairs == 64 ? 2 : 1)
    GemmF16GroupedKernel(const __grid_constant__ GemvParams p) {
  extern __shared__ __align__(16) uint8_t gemm_smem[];
  constexpr int kStageBytes = Layout<D, kPairs>::kStageBytes;
  constexpr int kColTiles = kPairs / 8;
  int* pair_row = reinterpret_cast<int*>(gemm_smem + size_t{kStages} * kStageBytes);
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int g = lane >> 2, t = lane & 3;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kTileRows;
  const uint8_t* w = nullptr;
  int begin = 0, end = 0;
  if (!SlotGroups<kTileRows>(p, o0, &w, &begin, &end)) return;
  const int64_t nb = p.in / 256;
  // Global row g of the warp's rows (only its address, for D::Shift: unused by aligned types).
  const uint8_t* w_row_a = w + (o0 + 16 * warp + g) * p.w_row_bytes;
  const F16DecodeTables tbl = DecodeTablesOf(p);
  for (int c0 = begin; c0 < end; c0 += kPairs) {
    const int cols = end - c0 < kPairs ? end - c0 : kPairs;
    __syncthreads();  // the previous chunk is done with pair_row and the stages
    LoadPairRows<kPairs>(p, c0, cols, pair_row);
    const CopyPlan<kPairs> plan = MakeCopyPlan<D, kPairs>(p, w, o0, cols, pair_row);
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      if (s < nb) CopyStage<D, kPairs>(gemm_smem + s * kStageBytes, plan, s);
      CommitCopies();  // empty groups too: the wait below counts groups
    }
    float acc[kColTiles][4] = {};
    if (kNarrowTails && cols <= 16) {
      ChunkProducts<D, kPairs, 2, kUnroll>(gemm_smem, plan, nb, w_row_a, warp, g, t, tbl, acc);
    } else if (kNarrowTails && cols <= 32) {
      ChunkProducts<D, kPairs, 4, kUnroll>(gemm_smem, plan, nb, w_row_a, warp, g, t, tbl, acc);
    } else if (kNarrowTails && kPairs > 64 && cols <= 64) {
      ChunkProducts<D, kPairs, 8, kUnroll>(gemm_smem, plan, nb, w_row_a, warp, g, t, tbl, acc);
    } else if (kNarrowTails && kPairs > 64 && cols <= 96) {
      ChunkProducts<D, kPairs, 12, kUnroll>(gemm_smem, plan, nb, w_row_a, warp, g, t, tbl, acc);
    } else {
      ChunkProducts<D, kPairs, kColTiles, kUnroll>(gemm_smem, plan, nb, w_row_a, warp, g, t, tbl,
                                                   acc);
    }
    StoreGroupedTile(p, o0 + 16 * warp + g, c0, cols, t, acc);
  }
}

// F32 rows -> F16, one thread per 16-byte output chunk: in pair order where p.x_pair_order (the
// IQ4_XS decoder's: elements 4i..4i+3 and 16+4i..16+4i+3 of a 32-value block interleaved), else
// in natural order (elements 8c..8c+7). Values beyond the F16 range saturate at +-65504 (an
// infinity would turn the MMA's zero weights into NaNs).
__global__ void __launch_bounds__(256)
    ConvertActivationsF16Kernel(const __grid_constant__ GemvParams p, uint16_t* xh) {
  AllowDependentLaunch();
  WaitForPrimaryGrid();  // the kernel writing x (launched before this one) has finished
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t per_row = p.in / 8;
  if (i >= per_row * p.rows) return;
  const int64_t r = i / per_row, c = i - r * per_row;
  float v[8];
  if (p.x_pair_order) {
    const int64_t k = (c >> 2) * 32 + 4 * (c & 3);  // element 4i of its block
    const float4 a = __ldg(reinterpret_cast<const float4*>(p.x + r * p.x_stride + k));
    const float4 b = __ldg(reinterpret_cast<const float4*>(p.x + r * p.x_stride + k + 16));
    const float pair[8] = {a.x, b.x, a.y, b.y, a.z, b.z, a.w, b.w};
    for (int j = 0; j < 8; ++j) v[j] = pair[j];
  } else {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p.x + r * p.x_stride + 8 * c));
    const float4 b = __ldg(reinterpret_cast<const float4*>(p.x + r * p.x_stride + 8 * c + 4));
    const float natural[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    for (int j = 0; j < 8; ++j) v[j] = natural[j];
  }
  uint32_t packed[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    packed[j] = SaturatedF16Pair(v[2 * j], v[2 * j + 1]);
  }
  *reinterpret_cast<uint4*>(xh + r * p.in + 8 * c) =
      make_uint4(packed[0], packed[1], packed[2], packed[3]);
}

// 0 = off, 1 = IQ4_XS only (measured on the H200 in session 9: 45-layer prefill 2048 tokens
// 4871 -> 7059 tok/s), 2 = IQ4_XS and Q4_K, the default since session 10 (H200: moe_gemv_cuda_test
// Q4_K cases within 1.05e-3; the Q4_K_M mix's 45-layer prefill 2048 / 4096 tokens 2084 / 2061 ->
// 3626 / 3571 tok/s, bench/gpu/results-h200-v9.txt). 3 = also Q6_K (the Q4_K_M mix's expert `down`
// in 19 of 42 MoE layers), the default since its H200 run (session 10: moe_gemv_cuda_test Q6_K
// cases within 1.2e-3; that prefill 3631 / 3580 -> 7713 / 7401 tok/s with every layer on the
// device).
int SettingFromEnv() {
  const char* v = std::getenv("STEPSERVE_GROUPED_GEMM_F16");
  if (v == nullptr || v[0] == '\0') return 3;
  return v[0] == '0' ? 0 : (v[0] == '1' ? 1 : (v[0] == '2' ? 2 : 3));
}

template <class D, bool kNarrowTails = false, int kPairs = 64, int kUnroll = kUnrollIb>
cudaError_t LaunchGemmF16(const GemvParams& p, int64_t slots, cudaStream_t stream) {
  static std::atomic<uint64_t> attribute_set{0};  // one per kernel instantiation
  return LaunchGroupedTiles(GemmF16GroupedKernel<D, kNarrowTails, kPairs, kUnroll>, kTileRows,
                            32 * kWarps, Layout<D, kPairs>::kSmemBytes, attribute_set, p, slots,
                            stream);
}

// The narrow last chunks, on unless STEPSERVE_GEMM_F16_NARROW_TAILS=0 (read once); built for the
// types of the published mixes' experts (IQ4_XS, Q4_K, Q6_K) only, to keep the 2-3 bit decoders'
// build as it was. Measured on the H100 (session 25, results-v22.txt calls 4 and 6; 24 layers,
// alternating): IQ4_XS prefill 2048 / 4096 tokens 14070 / 13701 and 14106 / 13776 -> 14913 /
// 14572 and 14930 / 14606 tok/s (+6%); Q4_K_M 2048 / 4096 14826, 14971 / 14512 -> 16096, 16135 /
// 15722, 15969 / 15607 (+7-8%); the 4-layer table's gate / down launches 1350 / 1290 -> 1220 /
// 1160 us. MoE GEMV (52), MoE (50) and whole-model (13) GPU tests pass with it.
bool NarrowTails() {
  static const bool on = EnvSwitchOn("STEPSERVE_GEMM_F16_NARROW_TAILS");
  return on;
}

// Chunks of 128 pairs (with the narrow classes): by default for IQ4_XS experts only;
// STEPSERVE_GEMM_F16_WIDE=0 turns them off, =2 also takes Q4_K and Q6_K (read once). Why: with ~57
// pairs per expert at a 2048-token prefill, about a third of the experts need a second chunk of
// 64, which decodes all of the expert's weights again (the IQ4_XS decode is ~2/3 of the kernel's
// instructions). Measured on the H100 (session 27, results-v24.txt call 1; 24 layers, alternating
// rounds): IQ4_XS prefill 2048 / 4096 tokens 16055 / 15767 and 16129 / 15833 -> 16963 / 16592,
// 16875 / 16587, 17115 / 16620, 16960 / 16589 tok/s (+5%); the Q4_K_M mix (Q4_K gate / up, Q6_K
// down) lost: 17356 / 16926 and 17175 / 16797 -> 16874 / 16762 and 16961 / 16676 (-1-3%) - its
// cheaper decode does not pay for one CTA per SM. moe_gemv_cuda_test 52/52, moe_cuda_test 50/50
// and model_cuda_test 13/13 pass with all three types wide.
int WideChunksSetting() {
  static const int setting = [] {
    const char* v = std::getenv("STEPSERVE_GEMM_F16_WIDE");
    if (v == nullptr || v[0] == '\0') return 1;
    return v[0] == '0' ? 0 : (v[0] == '2' ? 2 : 1);
  }();
  return setting;
}

// The wide IQ4_XS kernel with all 8 sub-blocks of a K block unrolled (227 registers, no spills:
// one CTA per SM leaves the room) instead of 4; STEPSERVE_GEMM_F16_WIDE_UNROLL8=0 turns it off.
// Measured on the H100 (session 28, results-v25.txt call 1; 24 layers, alternating rounds): IQ4_XS
// prefill 2048 / 4096 tokens 16836 / 16666 and 16796 / 16624 -> 17210 / 17049 and 17380 / 17020
// tok/s (+2-3%); moe_gemv_cuda_test 52/52 and model_cuda_test 13/13 pass with it.
bool WideUnrolled() {
  static const bool on = EnvSwitchOn("STEPSERVE_GEMM_F16_WIDE_UNROLL8");
  return on;
}

// STEPSERVE_GEMM_F16_WIDE_MIN_K=N (read once): wide chunks only for matrices of at least N
// columns; unset or 0: any. Why: in session 28's 4-layer prefill table (H100) the wide chunks sped
// the gate / up launches (K 4096) from 1220 to 1090 us but slowed the down launch (K 1280: five
// blocks per row) from 1160 to 1250 - a short K loop at one CTA per SM leaves each CTA's prologue
// and epilogue unhidden. For an A/B (2048: the down projection at 64 pairs, two CTAs per SM).
int64_t WideMinK() {
  static const int64_t k = [] {
    const char* v = std::getenv("STEPSERVE_GEMM_F16_WIDE_MIN_K");
    return v == nullptr ? int64_t{0} : static_cast<int64_t>(std::atoll(v));
  }();
  return k;
}

template <class D>
cudaError_t LaunchGemmF16MaybeNarrow(const GemvParams& p, int64_t slots, cudaStream_t stream) {
  const int wide = WideChunksSetting();
  if ((wide == 2 || (wide == 1 && std::is_same_v<D, Iq4XsF16Decoder>)) && p.in >= WideMinK()) {
    if constexpr (std::is_same_v<D, Iq4XsF16Decoder>) {
      if (WideUnrolled()) return LaunchGemmF16<D, true, 128, 8>(p, slots, stream);
    }
    return LaunchGemmF16<D, true, 128>(p, slots, stream);
  }
  return NarrowTails() ? LaunchGemmF16<D, true>(p, slots, stream)
                       : LaunchGemmF16<D, false>(p, slots, stream);
}

}  // namespace

std::atomic<int>& GroupedGemmF16Setting() {
  static std::atomic<int> setting{SettingFromEnv()};
  return setting;
}

// Q5_K through the grouped F16 GEMM too (in modes 2 and 3) unless STEPSERVE_Q5K_GROUPED_F16=0
// (read once), so the IQ4_XS mix's Q5_K attention `v` projection takes the dense grouped path from
// 9 rows (engine/backend/cuda/dense_grouped_matmul.cc) instead of the dp4a GEMV (session 36's
// 16-stream timeline: 28 us a layer on 128 CTAs, 15 us of it past the q/k/gate GEMV beside it).
// Narrow tails only (one instantiation: a decode's rows fit one chunk). Measured on the H100
// (session 37, 24 layers IQ4_XS, two alternating rounds): 12 / 16 streams 9.452 / 11.181 and
// 9.491 / 11.252 -> 9.457 / 11.043 and 9.425 / 11.051 ms per step (on par / -1.5%); the
// projection then adds 6.8 us a layer at 16 streams instead of 15.
bool Q5kGroupedF16() {
  static const bool on = EnvSwitchOn("STEPSERVE_Q5K_GROUPED_F16");
  return on;
}

bool GroupedGemmF16Applies(GgmlType type, int64_t in, int64_t slots) {
  const int setting = GroupedGemmF16Setting().load(std::memory_order_relaxed);
  // Mode 3 also takes the 2-3 bit decoders (gemm_f16_decoders_grid.cuh), which the MoE reaches
  // only while those types are turned on (GemvCudaSupports, STEPSERVE_GEMV_LOW_BIT).
  const bool low_bit = GemvCudaLowBitType(type);
  const bool type_ok = (setting >= 1 && type == GgmlType::kIQ4_XS) ||
                       (setting >= 2 && type == GgmlType::kQ4_K) ||
                       (setting >= 2 && type == GgmlType::kQ5_K && Q5kGroupedF16()) ||
                       (setting >= 3 && (type == GgmlType::kQ6_K || low_bit));
  return type_ok && in % 256 == 0 && slots >= 1 && slots <= 65535;
}

cudaError_t LaunchConvertActivationsF16(const GemvParams& p, uint16_t* xh, cudaStream_t stream) {
  if (GemmF16WgmmaOrder(p)) return LaunchConvertActivationsWgmma(p, xh, stream);
  const int64_t threads = p.in / 8 * p.rows;
  return LaunchWithPdl(ConvertActivationsF16Kernel,
                       dim3(static_cast<unsigned>((threads + 255) / 256)), dim3(256), 0, stream, p,
                       xh);
}

cudaError_t LaunchGemmF16Grouped(GgmlType type, const GemvParams& p, int64_t slots,
                                 cudaStream_t stream) {
  if (type == GgmlType::kIQ4_XS && p.x_pair_order) {
    if (GemmF16WgmmaOrder(p)) return LaunchGemmF16Wgmma(type, p, slots, stream);
    return LaunchGemmF16MaybeNarrow<Iq4XsF16Decoder>(p, slots, stream);
  }
  if (type == GgmlType::kQ4_K && !p.x_pair_order) {
    return LaunchGemmF16MaybeNarrow<Q4KF16Decoder>(p, slots, stream);
  }
  if (type == GgmlType::kQ6_K && !p.x_pair_order) {
    return LaunchGemmF16MaybeNarrow<Q6KF16Decoder>(p, slots, stream);
  }
  if (type == GgmlType::kQ5_K && !p.x_pair_order) {
    return LaunchGemmF16<Q5KF16Decoder, true, 64, 2>(p, slots, stream);  // 4: spills at 128
  }
  if (!p.x_pair_order) {
    switch (type) {
      case GgmlType::kIQ2_XXS:
        return LaunchGemmF16<Iq2XxsF16Decoder>(p, slots, stream);
      case GgmlType::kIQ2_XS:
        return LaunchGemmF16<Iq2XsF16Decoder>(p, slots, stream);
      case GgmlType::kIQ2_S:
        return LaunchGemmF16<Iq2SF16Decoder>(p, slots, stream);
      case GgmlType::kIQ3_XXS:
        return LaunchGemmF16<Iq3XxsF16Decoder>(p, slots, stream);
      case GgmlType::kIQ3_S:
        return LaunchGemmF16<Iq3SF16Decoder>(p, slots, stream);
      case GgmlType::kQ2_K:
        return LaunchGemmF16<Q2KF16Decoder>(p, slots, stream);
      case GgmlType::kQ3_K:
        return LaunchGemmF16<Q3KF16Decoder>(p, slots, stream);
      default:
        break;
    }
  }
  return cudaErrorNotSupported;
}

}  // namespace stepserve::kernels::gemv_internal
