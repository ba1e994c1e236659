// Grouped tensor-core GEMM of a prefill's MoE experts with F16 operands: IQ4_XS weights decoded
// to F16 with their sub-block scale folded in, times F16 activations, F32 accumulation
// (mma.sync m16n8k16). GemvParams grouped mode, like gemm_grouped_mma_cuda.cu; the default for
// many groups per matrix (STEPSERVE_GROUPED_GEMM_F16=0 keeps the int8 kernel).
//
// Why: the int8 grouped GEMM ran 2.37 ms (gate, up) and 2.42 ms (down) per projection at a
// 2048-token prefill (ncu, H200: 16384 pairs x 4096 x 1280 in 2.4 ms = 72 int8 TOPS, 7.2 of a
// MoE layer's ~9.3 ms). Both of its operands carry a scale per 32 values, so every 16x8x32 MMA
// costs ~14 instructions of scaling (two scale loads, four int -> float conversions, two scale
// products, four FMAs). Here the weight scale is folded into the F16 weights and the activations
// need none, so an MMA costs only its operand load; the F16 decode (table lookup, byte permute,
// subtract, scale: ~3 instructions per 2 weights) is paid once per warp and 64 columns.
//
// Tile: 128 weight rows (16 per warp, 8 warps) x 64 pairs; K in IQ4_XS blocks (256), two stages
// in flight (cp.async: 17 8-byte pieces per 136-byte block, rows padded to 144 bytes so the 8 rows
// one fragment load reads fall in distinct banks; activation rows 576 bytes apart, so a quarter
// warp's 16-byte loads of two rows fill the 32 banks). Two CTAs per SM (~108 KB shared each).
// Rows past `out` are never copied or stored.
//
// Fragment mapping: the activations are stored in the pair order of the int8 path
// (Q8ScratchPosition: element 4i + j at 8i + 2j, 16 + 4i + j at 8i + 2j + 1 of each 32-value
// block), so lane t's 16-byte chunk t of a sub-block holds exactly the 8 elements whose weights
// Lookup16Pairs yields from byte word t of the sub-block's qs, in the same order. Halves 0-3
// feed the first m16n8k16 (logical k 2t, 2t+1, 2t+8, 2t+9), halves 4-7 the second. The logical
// order of k inside an MMA does not matter as long as A and B agree, which they do lane by lane.
#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "kernels/common/dynamic_smem.h"
#include "kernels/common/pdl.cuh"
#include "kernels/matmul/gemv_block_util.cuh"
#include "kernels/matmul/gemv_cuda_internal.h"
#include "kernels/matmul/mma_iq4_util.cuh"

namespace stepserve::kernels::gemv_internal {
namespace {

#include "kernels/matmul/gemv_q8x_pieces.cuh"

constexpr int kWarps = 8;
constexpr int kTileRows = 16 * kWarps;  // weight (output) rows per CTA, 16 per warp
constexpr int kTilePairs = 64;          // activation rows (token, slot pairs) per chunk
constexpr int kColTiles = kTilePairs / 8;
constexpr int kStages = 2;
// Sub-blocks unrolled per step of the decode loop: all 8 spill (128 registers, the cap of two
// CTAs per SM); 4 fit in 120.
constexpr int kUnrollIb = 4;
constexpr int kWeightStride = 144;    // one 136-byte block + 8: rows 16 bytes apart mod 128
constexpr int kActStride = 512 + 64;  // 256 F16 + 64 bytes: rows 64 bytes apart mod 128
constexpr int kWeightStageBytes = kTileRows * kWeightStride;
constexpr int kActStageBytes = kTilePairs * kActStride;
constexpr int kStageBytes = kWeightStageBytes + kActStageBytes;
constexpr size_t kSmemBytes = size_t{kStages} * kStageBytes + kTilePairs * sizeof(int);
static_assert(kStageBytes % 16 == 0, "stages must stay 16-byte aligned");

// One thread's share of every stage copy of a chunk, set up once per chunk so that a copy costs a
// pointer increment (the session-9 profile of the first version: the copy loops' index math was
// ~1/4 of all instructions). Weights: 17 threads per row, one 8-byte piece each, 15 rows per pass
// (255 of the 256 threads), so a warp's copies cover whole rows (coalesced; the 8-byte pieces of
// a row land in consecutive banks); rows past `out` are not copied (their stale products are
// dropped). Activations: four threads per row, 16-byte pieces q, q + 4, .. (8 of 32), so at each
// step the four threads of a row read 64 contiguous bytes; rows past the chunk's `cols` are not
// copied either (an MMA column depends on its own B column only, and those are dropped).
constexpr int kWeightRowsPerPass = 15;
struct CopyPlan {
  const uint8_t* w_src;  // the thread's piece of block 0 of its first weight row
  const uint8_t* x_src;  // the thread's first piece of element 0 of its activation row
  int w_dst, x_dst;      // offsets within a stage
  int w_rows;            // rows of the thread's weight passes (0 for thread 255)
  bool x_on;
  int64_t w_pass_bytes;  // kWeightRowsPerPass rows of global weights
};
static_assert(kTilePairs * 4 == 32 * kWarps, "the copy plan maps 4 threads per activation row");
static_assert(kWeightRowsPerPass * 17 <= 32 * kWarps, "a weight pass needs 17 threads per row");

__device__ __forceinline__ CopyPlan MakeCopyPlan(const GemvParams& p, const uint8_t* w, int64_t o0,
                                                 int cols, const int* pair_row) {
  CopyPlan c;
  const int tid = static_cast<int>(threadIdx.x);
  const int r0 = tid / 17, piece = tid - 17 * r0;
  const int64_t valid = p.out - o0 < kTileRows ? p.out - o0 : kTileRows;  // rows inside `out`
  c.w_rows = r0 < kWeightRowsPerPass && r0 < valid
                 ? static_cast<int>((valid - 1 - r0) / kWeightRowsPerPass) + 1
                 : 0;
  c.w_src = w + (o0 + r0) * p.w_row_bytes + 8 * piece;
  c.w_dst = r0 * kWeightStride + 8 * piece;
  c.w_pass_bytes = kWeightRowsPerPass * p.w_row_bytes;
  const int rx = tid >> 2, q = tid & 3;
  c.x_src = reinterpret_cast<const uint8_t*>(p.xh) + static_cast<int64_t>(pair_row[rx]) * p.in * 2 +
            16 * q;
  c.x_dst = kWeightStageBytes + rx * kActStride + 16 * q;
  c.x_on = rx < cols;
  return c;
}

// Block kb of the chunk's weight rows and activation rows into `stage`.
__device__ __forceinline__ void CopyStage(uint8_t* stage, const CopyPlan& c, int64_t kb) {
  const uint8_t* ws = c.w_src + kb * kIq4Bytes;
  uint8_t* wd = stage + c.w_dst;
  for (int m = 0; m < c.w_rows; ++m) {
    CopyAsync8(wd, ws);
    ws += c.w_pass_bytes;
    wd += kWeightRowsPerPass * kWeightStride;
  }
  if (c.x_on) {
    const uint8_t* xs = c.x_src + kb * 512;
    uint8_t* xd = stage + c.x_dst;
#pragma unroll
    for (int m = 0; m < 8; ++m) CopyAsync16(xd + 64 * m, xs + 64 * m);
  }
}

// F16 pair arithmetic and conversion, round to nearest even, subnormals kept (inline PTX so the
// host emulation, tests/cuda_emu/grouped_gemm, can substitute these three).
__device__ __forceinline__ uint32_t SubF16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t MulF16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint16_t F16FromF32(float x) {
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
}

// Two F16 weights from bytes (sel) of `biased` (IQ4_NL table value + 128 per byte) times `scale`:
// 0x64XX is the F16 1024 + XX, so subtracting 1152 leaves the table value exactly; one rounding
// in the product. (A fused h * s - 1152 * s would round 1152 * s: up to half a table step.)
__device__ __forceinline__ uint32_t ScaledHalves(uint32_t biased, uint32_t sel, uint32_t scale) {
  const uint32_t h = __byte_perm(biased, 0x64646464u, sel);
  return MulF16x2(SubF16x2(h, 0x64806480u), scale);  // 0x6480: 1152
}

// The 8 sub-block scales d * (ls - 32) of an IQ4_XS block header as F16 pairs: s[0] = {ib 0, 2},
// s[1] = {4, 6}, s[2] = {1, 3}, s[3] = {5, 7}. The 6-bit ls of all 8 sub-blocks are assembled as
// bytes with whole-word bit operations, turned into exact F16 (0x64XX = 1024 + XX, minus 1056)
// and multiplied by d in F16: one rounding, as when the float d * (ls - 32) is rounded to F16.
// Why: per sub-block and row the scalar decode (SubBlockScale, then a float -> F16 conversion)
// cost ~7 integer-pipe instructions; the ALU pipe is the decode's limit (session-9 ncu: math-pipe
// throttle the first stall reason).
__device__ __forceinline__ void SubBlockScalesF16(uint2 h, uint32_t (&s)[4]) {
  const uint32_t sh = h.x >> 16;  // scales_h: bits 2ib, 2ib + 1 = bits 4-5 of ls
  const uint32_t nib = __byte_perm(sh & 0x0F0Fu, (sh >> 4) & 0x0F0Fu, 0x5140u);  // byte k: nibble k
  const uint32_t ls_even = (h.y & 0x0F0F0F0Fu) | ((nib & 0x03030303u) << 4);     // byte k: ls(2k)
  const uint32_t ls_odd = ((h.y >> 4) & 0x0F0F0F0Fu) | ((nib & 0x0C0C0C0Cu) << 2);  // ls(2k + 1)
  const uint32_t d2 = __byte_perm(h.x, 0, 0x1010u);                                 // {d, d}
  s[0] = __byte_perm(ls_even, 0x64646464u, 0x4140u);
  s[1] = __byte_perm(ls_even, 0x64646464u, 0x4342u);
  s[2] = __byte_perm(ls_odd, 0x64646464u, 0x4140u);
  s[3] = __byte_perm(ls_odd, 0x64646464u, 0x4342u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    s[i] = MulF16x2(SubF16x2(s[i], 0x64206420u), d2);  // 0x6420: 1056
  }
}

// Sub-block ib's scale from SubBlockScalesF16 in both halves (ib & 3 is known at compile time
// under the unrolled loop; ib & 4 selects between two registers).
__device__ __forceinline__ uint32_t ScalePair(const uint32_t (&s)[4], int ib) {
  const uint32_t pair = (ib & 1) ? ((ib & 4) ? s[3] : s[2]) : ((ib & 4) ? s[1] : s[0]);
  return __byte_perm(pair, 0, (ib & 2) ? 0x3232u : 0x1010u);
}

// The staged block: the warp's 16 rows x the chunk's 64 columns, into acc.
__device__ __forceinline__ void MmaStagedBlock(const uint8_t* stage, int warp, int g, int t,
                                               const uint32_t (&tbl)[4],
                                               float (&acc)[kColTiles][4]) {
  const uint8_t* ra = stage + (16 * warp + g) * kWeightStride;
  const uint8_t* rb = ra + 8 * kWeightStride;
  const uint8_t* act = stage + kWeightStageBytes + g * kActStride + 16 * t;
  const uint2 ha = *reinterpret_cast<const uint2*>(ra);
  const uint2 hb = *reinterpret_cast<const uint2*>(rb);
  uint32_t scales_a[4], scales_b[4];
  SubBlockScalesF16(ha, scales_a);
  SubBlockScalesF16(hb, scales_b);
#pragma unroll kUnrollIb
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t qa = *reinterpret_cast<const uint32_t*>(ra + 8 + 16 * ib + 4 * t);
    const uint32_t qb = *reinterpret_cast<const uint32_t*>(rb + 8 + 16 * ib + 4 * t);
    const uint32_t sa = ScalePair(scales_a, ib), sb = ScalePair(scales_b, ib);
    const uint2 va = Lookup16Pairs(qa, tbl), vb = Lookup16Pairs(qb, tbl);
    // a0 / a2: row g, a1 / a3: row g + 8 (mma.m16n8k16 A fragment order).
    const uint32_t a_lo[4] = {ScaledHalves(va.x, 0x4140u, sa), ScaledHalves(vb.x, 0x4140u, sb),
                              ScaledHalves(va.x, 0x4342u, sa), ScaledHalves(vb.x, 0x4342u, sb)};
    const uint32_t a_hi[4] = {ScaledHalves(va.y, 0x4140u, sa), ScaledHalves(vb.y, 0x4140u, sb),
                              ScaledHalves(va.y, 0x4342u, sa), ScaledHalves(vb.y, 0x4342u, sb)};
    // All 8 column tiles, also past the chunk's columns: a branch per tile split the loop into
    // basic blocks the compiler could not schedule across (the first version's profile).
#pragma unroll
    for (int j = 0; j < kColTiles; ++j) {
      // Column g of tile j = staged row 8j + g; chunk t of sub-block ib.
      const uint4 x = *reinterpret_cast<const uint4*>(act + 8 * j * kActStride + 64 * ib);
      MmaF16(a_lo, x.x, x.y, acc[j]);
      MmaF16(a_hi, x.z, x.w, acc[j]);
    }
  }
}

// Grid (128-row tiles, slots). A slot's groups run in chunks of 64 (the last one's missing
// columns are computed and dropped).
__global__ void __launch_bounds__(32 * kWarps, 2)
    GemmF16Iq4XsGroupedKernel(const __grid_constant__ GemvParams p) {
  extern __shared__ __align__(16) uint8_t gemm_smem[];
  int* pair_row = reinterpret_cast<int*>(gemm_smem + size_t{kStages} * kStageBytes);
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int g = lane >> 2, t = lane & 3;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kTileRows;
  const uint8_t* w = nullptr;
  int begin = 0, end = 0;
  if (!SlotGroups<kTileRows>(p, o0, &w, &begin, &end)) return;
  const int64_t nb = p.in / 256;
  // The table biased by 128 per byte (ScaledHalves' exact int8 -> F16).
  const uint32_t tbl[4] = {p.iq4nl[0] ^ 0x80808080u, p.iq4nl[1] ^ 0x80808080u,
                           p.iq4nl[2] ^ 0x80808080u, p.iq4nl[3] ^ 0x80808080u};
  for (int c0 = begin; c0 < end; c0 += kTilePairs) {
    const int cols = end - c0 < kTilePairs ? end - c0 : kTilePairs;
    __syncthreads();  // the previous chunk is done with pair_row and the stages
    LoadPairRows<kTilePairs>(p, c0, cols, pair_row);
    const CopyPlan plan = MakeCopyPlan(p, w, o0, cols, pair_row);
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      if (s < nb) CopyStage(gemm_smem + s * kStageBytes, plan, s);
      CommitCopies();  // empty groups too: the wait below counts groups
    }
    float acc[kColTiles][4] = {};
    for (int64_t kb = 0; kb < nb; ++kb) {
      uint8_t* stage = gemm_smem + static_cast<int>(kb % kStages) * kStageBytes;
      WaitCopiesButOne();  // this thread's copies of block kb have landed
      __syncthreads();     // and everyone's
      MmaStagedBlock(stage, warp, g, t, tbl, acc);
      __syncthreads();  // every warp is done with the stage before it is refilled
      if (kb + kStages < nb) CopyStage(stage, plan, kb + kStages);
      CommitCopies();
    }
    StoreGroupedTile(p, o0 + 16 * warp + g, c0, cols, t, acc);
  }
}

// F32 rows -> F16 in pair order (see the fragment mapping above), one thread per 16-byte output
// chunk: elements 4i..4i+3 and 16+4i..16+4i+3 of a 32-value block interleaved. Values beyond the
// F16 range saturate at +-65504 (an infinity would turn the MMA's zero weights into NaNs).
__global__ void __launch_bounds__(256)
    ConvertF16PairOrderKernel(const __grid_constant__ GemvParams p, uint16_t* xh) {
  AllowDependentLaunch();
  WaitForPrimaryGrid();  // the kernel writing x (launched before this one) has finished
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t per_row = p.in / 8;
  if (i >= per_row * p.rows) return;
  const int64_t r = i / per_row, c = i - r * per_row;
  const int64_t k = (c >> 2) * 32 + 4 * (c & 3);  // element 4i of its block
  const float4 a = __ldg(reinterpret_cast<const float4*>(p.x + r * p.x_stride + k));
  const float4 b = __ldg(reinterpret_cast<const float4*>(p.x + r * p.x_stride + k + 16));
  const float v[8] = {a.x, b.x, a.y, b.y, a.z, b.z, a.w, b.w};
  uint32_t packed[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint16_t lo = F16FromF32(fminf(fmaxf(v[2 * j], -65504.f), 65504.f));
    const uint16_t hi = F16FromF32(fminf(fmaxf(v[2 * j + 1], -65504.f), 65504.f));
    packed[j] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
  *reinterpret_cast<uint4*>(xh + r * p.in + 8 * c) =
      make_uint4(packed[0], packed[1], packed[2], packed[3]);
}

bool SettingFromEnv() {
  const char* v = std::getenv("STEPSERVE_GROUPED_GEMM_F16");
  return v == nullptr || v[0] != '0';
}

}  // namespace

std::atomic<bool>& GroupedGemmF16Setting() {
  static std::atomic<bool> setting{SettingFromEnv()};
  return setting;
}

bool GroupedGemmF16Applies(GgmlType type, int64_t in, int64_t slots) {
  return GroupedGemmF16Setting().load(std::memory_order_relaxed) && type == GgmlType::kIQ4_XS &&
         in % 256 == 0 && slots >= 1 && slots <= 65535;
}

cudaError_t LaunchConvertF16PairOrder(const GemvParams& p, uint16_t* xh, cudaStream_t stream) {
  const int64_t threads = p.in / 8 * p.rows;
  return LaunchWithPdl(ConvertF16PairOrderKernel,
                       dim3(static_cast<unsigned>((threads + 255) / 256)), dim3(256), 0, stream, p,
                       xh);
}

cudaError_t LaunchGemmF16Grouped(const GemvParams& p, int64_t slots, cudaStream_t stream) {
  static std::atomic<uint64_t> attribute_set{0};
  return LaunchGroupedTiles(GemmF16Iq4XsGroupedKernel, kTileRows, 32 * kWarps, kSmemBytes,
                            attribute_set, p, slots, stream);
}

}  // namespace stepserve::kernels::gemv_internal
