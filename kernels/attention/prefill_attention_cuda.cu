// Tensor-core prefill attention (paged_attention_cuda.h: PrefillAttentionCuda), flash-attention 2
// style on mma.sync.m16n8k16 (F16 inputs, F32 accumulators).
//
// CTA = 4 warps = one tile of up to 64 query rows (warp w: tile rows 16w..16w+15; a short tile's
// missing rows repeat its last row and are never written) x one query head h (KV head h / group):
//   Q rows of head h -> * scale * log2(e) -> F16 A fragments, kept in registers for the whole CTA;
//   key positions [kv_lo, kv_hi] = [first position - window + 1 (>= 0), last position] in tiles
//   of 64: each K / V tile is gathered through the block table into shared memory as F16 (F16
//   pages with cp.async, F32 / Q8_0 pages loaded, converted and stored), two stages so the next
//   tile's copies are in flight while this one is used;
//   per warp and key tile (skipped when it lies outside all of the warp's rows' windows):
//     S = Q K^T (K rows as the col-major B operand via ldmatrix), masked per element (key after
//     the query, or outside its window: -inf), online softmax in registers (log2 domain, exp2),
//     P re-packed from the S accumulators as F16 A fragments, O += P V (V via ldmatrix.trans);
//   O / l -> F32 out.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 .f16, lane = 4 * gid + tig):
//   A (16 x 16, row-major): a0 = (row gid, cols 2tig, 2tig+1), a1 = (row gid+8, same cols),
//     a2 = (row gid, cols 2tig+8, 2tig+9), a3 = (row gid+8, cols 2tig+8, 2tig+9);
//   B (16 x 8, "col"): b0 = (rows k = 2tig, 2tig+1; col n = gid), b1 = (rows 2tig+8, 2tig+9; gid);
//   C (16 x 8, F32): c0, c1 = (row gid, cols 2tig, 2tig+1), c2, c3 = (row gid+8, same cols).
//   Each .b32 register holds two F16, the lower column / row index in the low 16 bits.
// ldmatrix m8n8: lanes 8i..8i+7 give the row addresses of matrix i; lane gets, of matrix i, row
// gid, elements 2tig and 2tig+1 (with .trans: rows 2tig and 2tig+1 of column gid).
//   S = Q K^T: B[k = dim][n = key] = K[key][dim]: an 8 x 8 block of K rows (keys) x 8 dims,
//     loaded plainly, gives lane (key gid, dims 2tig, 2tig+1) = b0 (b1: the next 8 dims).
//   O += P V: B[k = key][n = dim] = V[key][dim]: an 8 x 8 block of V rows (keys) x 8 dims, loaded
//     with .trans, gives lane (keys 2tig, 2tig+1; dim gid) = b0 (b1: the next 8 keys).
//   P as A: the S tiles 2j (keys 16j..16j+7) and 2j+1 (keys 16j+8..16j+15) hold exactly
//     a0 = (c0, c1) and a1 = (c2, c3) of tile 2j, a2 = (c0, c1), a3 = (c2, c3) of tile 2j+1.
#include <cuda_fp16.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/attention/attention_mma.cuh"
#include "kernels/attention/paged_attention_cuda.h"
#include "kernels/common/cp_async.cuh"
#include "kernels/common/dynamic_smem.h"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/sigmoid.cuh"

namespace stepserve::kernels {
namespace {

constexpr int kWarps = 4;               // row warps per query head
constexpr int kThreads = 32 * kWarps;   // threads per query head
constexpr int kTileRows = 16 * kWarps;  // query rows per CTA
constexpr int kKeys = 64;               // key positions per shared-memory tile
// Halves of padding per shared K / V row: a row stride of (head_dim + 8) * 2 bytes is an odd
// multiple of 16 bytes for head_dim 128 and 192, so the 8 row addresses of an ldmatrix (8
// consecutive rows, same columns) fall in distinct 4-bank groups: no bank conflicts.
constexpr int kPad = 8;
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kTileRows == kPrefillTileRows);
static_assert(kThreads == 2 * kKeys);  // the prologue computes two tiles' offsets, one per thread
// of the first head

struct PrefillParams {
  const float* q;
  int64_t q_stride;
  float* out;
  int64_t out_stride;
  const PagedAttentionCudaRow* rows;
  int64_t n_rows;
  const int32_t* tables;
  const PrefillTileCuda* tiles;
  int n_tiles;
  const void* k_cache;
  const void* v_cache;
  int64_t num_blocks;
  int block_size;
  int kv_heads;
  int group;   // query heads per KV head
  int window;  // 0: full causal attention
  float scale_log2;
  const float*
      gate;  // optional head gate logits: out row r, head h *= sigmoid(gate[r * stride + h])
  int64_t gate_stride;
};

struct KvQ8 {};  // element tag of Q8_0 pages (addressed in bytes, 2-byte aligned)

using attention_mma::LdMatrixX4;
using attention_mma::LdMatrixX4Trans;
using attention_mma::MmaF16;
using attention_mma::PackHalf2;

// Offset (elements; bytes for Q8_0) of (position, KV head g, dim 0) in the cache, or -1 for a
// position past the tile's last query (its slot may be unwritten) or a table entry that is not a
// real page (never the case after host validation; guards memory safety). Both read as zeros.
template <int kDim, typename KvT>
__device__ __forceinline__ int64_t KeyOffset(const PrefillParams& p, const int32_t* table,
                                             int64_t position, int64_t kv_hi, int g) {
  if (position > kv_hi) return -1;
  const int64_t page = table[position / p.block_size];
  if (page < 0 || page >= p.num_blocks) return -1;
  const int64_t vec = (page * p.block_size + position % p.block_size) * p.kv_heads + g;
  if constexpr (std::is_same_v<KvT, KvQ8>) {
    return vec * (kDim / kKvQ8BlockElems * kKvQ8BlockBytes);
  } else {
    return vec * kDim;
  }
}

// Raw cache bits of one task (8 consecutive values of a K row and of the V row), loaded for a
// batch of tasks before any is converted so the loads of the batch are in flight together.
template <typename KvT>
struct RawChunk;
template <>
struct RawChunk<float> {
  float4 k[2], v[2];
};
template <>
struct RawChunk<KvQ8> {
  uint16_t k_scale, v_scale;  // F16 bits
  uint16_t k[4], v[4];        // int8 pairs, first value in the low byte
};

__device__ __forceinline__ void LoadRaw(const float* k, const float* v, RawChunk<float>& r) {
  r.k[0] = __ldg(reinterpret_cast<const float4*>(k));
  r.k[1] = __ldg(reinterpret_cast<const float4*>(k) + 1);
  r.v[0] = __ldg(reinterpret_cast<const float4*>(v));
  r.v[1] = __ldg(reinterpret_cast<const float4*>(v) + 1);
}
__device__ __forceinline__ void ZeroRaw(RawChunk<float>& r) {
  r.k[0] = r.k[1] = r.v[0] = r.v[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}
__device__ __forceinline__ uint4 ToHalves(const float4 (&x)[2]) {
  return make_uint4(PackHalf2(x[0].x, x[0].y), PackHalf2(x[0].z, x[0].w), PackHalf2(x[1].x, x[1].y),
                    PackHalf2(x[1].z, x[1].w));
}
__device__ __forceinline__ void StoreRaw(const RawChunk<float>& r, __half* kd, __half* vd) {
  *reinterpret_cast<uint4*>(kd) = ToHalves(r.k);
  *reinterpret_cast<uint4*>(vd) = ToHalves(r.v);
}

// Q8_0: `k` / `v` point at the block, `off` is the first value's index in it (a multiple of 8).
// 16-bit loads: blocks are only 2-byte aligned.
__device__ __forceinline__ void LoadRaw(const uint8_t* k, const uint8_t* v, int off,
                                        RawChunk<KvQ8>& r) {
  r.k_scale = __ldg(reinterpret_cast<const uint16_t*>(k));
  r.v_scale = __ldg(reinterpret_cast<const uint16_t*>(v));
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    r.k[i] = __ldg(reinterpret_cast<const uint16_t*>(k + 2 + off) + i);
    r.v[i] = __ldg(reinterpret_cast<const uint16_t*>(v + 2 + off) + i);
  }
}
__device__ __forceinline__ void ZeroRaw(RawChunk<KvQ8>& r) {
  r.k_scale = r.v_scale = 0;
  r.k[0] = r.k[1] = r.k[2] = r.k[3] = r.v[0] = r.v[1] = r.v[2] = r.v[3] = 0;
}
// The values are the F32 products scale * int8 (what the reference and the CUDA decode kernel
// read), rounded to F16.
__device__ __forceinline__ uint4 ToHalves(uint16_t scale_bits, const uint16_t (&q)[4]) {
  const float scale = __half2float(__ushort_as_half(scale_bits));
  uint32_t h[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    h[i] = PackHalf2(static_cast<float>(static_cast<int8_t>(q[i] & 0xFF)) * scale,
                     static_cast<float>(static_cast<int8_t>(q[i] >> 8)) * scale);
  }
  return make_uint4(h[0], h[1], h[2], h[3]);
}
__device__ __forceinline__ void StoreRaw(const RawChunk<KvQ8>& r, __half* kd, __half* vd) {
  *reinterpret_cast<uint4*>(kd) = ToHalves(r.k_scale, r.k);
  *reinterpret_cast<uint4*>(vd) = ToHalves(r.v_scale, r.v);
}

// The K and V rows of one key tile (cache offsets in offsets[0..kKeys)) into k_s / v_s as F16,
// one task per 8 values (16 shared bytes); rows with offset -1 become zeros. F16 pages go through
// cp.async (the caller commits the group); F32 and Q8_0 pages are loaded kBatch tasks at a time
// and converted in registers.
template <int kDim, typename KvT, int kCtaThreads>
__device__ __forceinline__ void LoadKvTile(const PrefillParams& p, const int64_t* offsets,
                                           __half* k_s, __half* v_s) {
  constexpr int kChunks = kDim / 8;
  constexpr int kStride = kDim + kPad;
  // Per thread: 8 (128) or 12 (192) with one query head per CTA, 4 or 6 with two.
  constexpr int kTasks = kKeys * kChunks / kCtaThreads;
  static_assert(kKeys * kChunks % kCtaThreads == 0);
  if constexpr (std::is_same_v<KvT, __half>) {
    // (Not unrolled: unrolling let the compiler keep every copy's addresses live, +80 registers.)
#pragma unroll 1
    for (int i = 0; i < kTasks; ++i) {
      const int idx = static_cast<int>(threadIdx.x) + i * kCtaThreads;
      const int j = idx / kChunks;
      const int c = idx - j * kChunks;
      __half* kd = k_s + j * kStride + 8 * c;
      __half* vd = v_s + j * kStride + 8 * c;
      const int64_t base = offsets[j];
      if (base >= 0) {
        CopyAsync16(kd, static_cast<const __half*>(p.k_cache) + base + 8 * c);
        CopyAsync16(vd, static_cast<const __half*>(p.v_cache) + base + 8 * c);
      } else {
        *reinterpret_cast<uint4*>(kd) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(vd) = make_uint4(0, 0, 0, 0);
      }
    }
  } else {
    constexpr int kBatch = kTasks % 4 == 0 ? 4 : 3;
    static_assert(kTasks % kBatch == 0);
#pragma unroll 1
    for (int i0 = 0; i0 < kTasks; i0 += kBatch) {
      RawChunk<KvT> raw[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int idx = static_cast<int>(threadIdx.x) + (i0 + b) * kCtaThreads;
        const int j = idx / kChunks;
        const int c = idx - j * kChunks;
        const int64_t base = offsets[j];
        if (base < 0) {
          ZeroRaw(raw[b]);
        } else if constexpr (std::is_same_v<KvT, float>) {
          LoadRaw(static_cast<const float*>(p.k_cache) + base + 8 * c,
                  static_cast<const float*>(p.v_cache) + base + 8 * c, raw[b]);
        } else {
          const int64_t block = base + (8 * c / kKvQ8BlockElems) * kKvQ8BlockBytes;
          LoadRaw(static_cast<const uint8_t*>(p.k_cache) + block,
                  static_cast<const uint8_t*>(p.v_cache) + block, (8 * c) % kKvQ8BlockElems,
                  raw[b]);
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int idx = static_cast<int>(threadIdx.x) + (i0 + b) * kCtaThreads;
        const int j = idx / kChunks;
        const int c = idx - j * kChunks;
        StoreRaw(raw[b], k_s + j * kStride + 8 * c, v_s + j * kStride + 8 * c);
      }
    }
  }
}

// One warp, one key tile [k0, k0 + kKeys) in shared memory (k_addr / v_addr: this lane's ldmatrix
// addresses for the tile's first block): the online-softmax update of this lane's two rows
// (query positions qp[0] for row gid, qp[1] for row gid + 8). `masked`: some key of the tile is
// invisible to some row of the warp.
template <int kDim>
__device__ __forceinline__ void AttendKeyTile(uint32_t k_addr, uint32_t v_addr, int k0, bool masked,
                                              const int (&qp)[2], int window,
                                              const uint32_t (&qa)[kDim / 16][4],
                                              float (&o)[kDim / 8][4], float (&m)[2],
                                              float (&l)[2]) {
  constexpr int kStrideBytes = (kDim + kPad) * 2;
  const int tig = threadIdx.x & 3;
  // S = Q K^T: 8 n-tiles of 8 keys; one ldmatrix.x4 gives b0, b1 of two consecutive k-steps.
  float s[kKeys / 8][4];
#pragma unroll
  for (int nt = 0; nt < kKeys / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
  for (int kp = 0; kp < kDim / 32; ++kp) {
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
      uint32_t b[4];
      LdMatrixX4(k_addr + nt * 8 * kStrideBytes + kp * 64, b);
      MmaF16(s[nt], qa[2 * kp], b[0], b[1]);
      MmaF16(s[nt], qa[2 * kp + 1], b[2], b[3]);
    }
  }
  if (masked) {
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + 8 * nt + 2 * tig + (e & 1);
        const int q = qp[e >> 1];
        if (key > q || (window > 0 && q - key >= window)) s[nt][e] = -INFINITY;
      }
    }
  }
  // Online softmax per row (scores are in log2 units: Q carries log2(e)). The 4 lanes of a quad
  // hold one row's 64 scores; the running max is quad-uniform, so each lane keeps a partial sum.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
    const float m_new = fmaxf(m[r], mx);
    // Every key so far masked: subtract 0 instead of -inf, so exp2(-inf - 0) = 0 (never NaN).
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = exp2f(m[r] - m_use);  // 0 while m[r] = -inf (O and l are still 0)
    m[r] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
      s[nt][2 * r] = exp2f(s[nt][2 * r] - m_use);
      s[nt][2 * r + 1] = exp2f(s[nt][2 * r + 1] - m_use);
      sum += s[nt][2 * r] + s[nt][2 * r + 1];
    }
    l[r] = l[r] * alpha + sum;
#pragma unroll
    for (int dt = 0; dt < kDim / 8; ++dt) {
      o[dt][2 * r] *= alpha;
      o[dt][2 * r + 1] *= alpha;
    }
  }
  // O += P V: 4 k-steps of 16 keys; one ldmatrix.x4.trans gives b0, b1 of two dim n-tiles.
#pragma unroll
  for (int j = 0; j < kKeys / 16; ++j) {
    const uint32_t pa[4] = {
        PackHalf2(s[2 * j][0], s[2 * j][1]), PackHalf2(s[2 * j][2], s[2 * j][3]),
        PackHalf2(s[2 * j + 1][0], s[2 * j + 1][1]), PackHalf2(s[2 * j + 1][2], s[2 * j + 1][3])};
#pragma unroll
    for (int dp = 0; dp < kDim / 16; ++dp) {
      uint32_t b[4];
      LdMatrixX4Trans(v_addr + j * 16 * kStrideBytes + dp * 32, b);
      MmaF16(o[2 * dp], pa, b[0], b[1]);
      MmaF16(o[2 * dp + 1], pa, b[2], b[3]);
    }
  }
}

// kHeads query heads of one KV head per CTA (grid y: heads / kHeads), kWarps row warps each
// (warps kWarps * i .. kWarps * i + kWarps - 1: head i): with 2 the CTA loads (and for F32 / Q8_0
// pages converts) each K / V tile once for both heads, half the tile traffic of one head per CTA
// at the same warps per SM (the 4-warp CTA's 174 registers allow 2 per SM, the 8-warp one 1).
template <int kDim, typename KvT, int kHeads>
__global__ void __launch_bounds__(kThreads* kHeads) PrefillAttentionKernel(const PrefillParams p) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  constexpr int kStride = kDim + kPad;
  constexpr int kTileHalves = kKeys * kStride;
  extern __shared__ uint4 smem4[];
  __half* kv_s = reinterpret_cast<__half*>(smem4);  // [2 stages][K, V][kKeys][kStride]
  int64_t* offset_s = reinterpret_cast<int64_t*>(kv_s + 4 * kTileHalves);  // [2 stages][kKeys]

  // The heaviest tiles (latest positions of a sequence) first: they start while the grid fills.
  const PrefillTileCuda tile = p.tiles[p.n_tiles - 1 - static_cast<int>(blockIdx.x)];
  if (tile.count < 1 || tile.count > kTileRows || tile.first_record < 0 ||
      tile.first_record > p.n_rows - tile.count) {
    return;  // not a tile BuildPrefillTiles makes; the whole CTA leaves
  }
  // The host launches kHeads > 1 only when group % kHeads == 0: the CTA's heads share g.
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = (tid >> 5) % kWarps;  // row warp within the head
  const int h = static_cast<int>(blockIdx.y) * kHeads + (tid >> 5) / kWarps;
  const int g = static_cast<int>(blockIdx.y) * kHeads / p.group;
  const PagedAttentionCudaRow* records = p.rows + tile.first_record;
  const int first_pos = records[0].position;
  const int kv_hi = records[tile.count - 1].position;
  if (kv_hi < first_pos) return;  // positions not ascending (not a BuildPrefillTiles tile)
  const int kv_lo = p.window > 0 ? max(0, first_pos - p.window + 1) : 0;
  const int32_t* table = p.tables + records[0].table_offset;

  // This lane's accumulator rows gid and gid + 8 of the warp's 16 (clamped to the last record).
  const bool warp_active = 16 * warp < tile.count;
  int qp[2];
  int32_t q_row[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const PagedAttentionCudaRow rec = records[min(16 * warp + (lane >> 2) + 8 * r, tile.count - 1)];
    qp[r] = rec.position;
    q_row[r] = rec.q_row;
  }
  // The warp's rows see keys [w_vis_lo, w_hi]; keys in [w_vis_hi, w_lo] are visible to all.
  const int w_lo = __reduce_min_sync(0xFFFFFFFFu, min(qp[0], qp[1]));
  const int w_hi = __reduce_max_sync(0xFFFFFFFFu, max(qp[0], qp[1]));
  const int w_vis_lo = p.window > 0 ? max(0, w_lo - p.window + 1) : 0;
  const int w_vis_hi = p.window > 0 ? w_hi - p.window + 1 : 0;

  // Q -> A fragments of the kDim / 16 k-steps (dims 16kk + 2tig, +1 and +8, +9).
  uint32_t qa[kDim / 16][4];
  {
    const int tig = lane & 3;
    const float* q0 = p.q + q_row[0] * p.q_stride + static_cast<int64_t>(h) * kDim + 2 * tig;
    const float* q1 = p.q + q_row[1] * p.q_stride + static_cast<int64_t>(h) * kDim + 2 * tig;
    const float sc = p.scale_log2;
#pragma unroll
    for (int kk = 0; kk < kDim / 16; ++kk) {
      const int c = 16 * kk;
      qa[kk][0] = PackHalf2(q0[c] * sc, q0[c + 1] * sc);
      qa[kk][1] = PackHalf2(q1[c] * sc, q1[c + 1] * sc);
      qa[kk][2] = PackHalf2(q0[c + 8] * sc, q0[c + 9] * sc);
      qa[kk][3] = PackHalf2(q1[c + 8] * sc, q1[c + 9] * sc);
    }
  }
  float o[kDim / 8][4];
#pragma unroll
  for (int dt = 0; dt < kDim / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};

  // ldmatrix row addresses of this lane in stage 0 (stage 1: + 2 tiles). K: matrix lane / 8 is
  // keys 0..7 x dims 8 (lane / 8)..+7. V (.trans): matrix lane / 8 is keys 8 ((lane / 8) & 1)..+7
  // x dims 8 (lane / 16)..+7.
  const uint32_t smem_base = SharedAddress(kv_s);
  const uint32_t k_lane = smem_base + ((lane & 7) * kStride + 8 * (lane >> 3)) * 2;
  const uint32_t v_lane =
      smem_base +
      (kTileHalves + ((lane & 7) + 8 * ((lane >> 3) & 1)) * kStride + 8 * (lane >> 4)) * 2;

  const int n_key_tiles = (kv_hi - kv_lo) / kKeys + 1;
  // Prologue: offsets of key tiles 0 and 1, then tile 0's copies.
  if (tid < kKeys || (tid < 2 * kKeys && n_key_tiles > 1)) {
    offset_s[tid] = KeyOffset<kDim, KvT>(p, table, int64_t{kv_lo} + tid, kv_hi, g);
  }
  __syncthreads();
  LoadKvTile<kDim, KvT, kThreads * kHeads>(p, offset_s, kv_s, kv_s + kTileHalves);
  CommitCopies();
#pragma unroll 1
  for (int t = 0; t < n_key_tiles; ++t) {
    const int stage = t & 1;
    // Tile t + 1 into the other stage, last read by iteration t - 1 (before its final barrier).
    if (t + 1 < n_key_tiles) {
      __half* next = kv_s + (stage ^ 1) * 2 * kTileHalves;
      LoadKvTile<kDim, KvT, kThreads * kHeads>(p, offset_s + (stage ^ 1) * kKeys, next,
                                               next + kTileHalves);
    }
    CommitCopies();  // possibly empty: keeps "all but the newest group" = tile t
    WaitCopiesButOne();
    __syncthreads();  // tile t (copies and stores of every thread) visible
    // Offsets of tile t + 2 into this stage's slots: their last reader was tile t's load (before
    // the barrier above); tile t + 2's load comes after the barrier that ends this iteration.
    if (t + 2 < n_key_tiles && tid < kKeys) {
      offset_s[stage * kKeys + tid] =
          KeyOffset<kDim, KvT>(p, table, int64_t{kv_lo} + int64_t{t + 2} * kKeys + tid, kv_hi, g);
    }
    const int k0 = kv_lo + t * kKeys;
    if (warp_active && k0 <= w_hi && k0 + kKeys - 1 >= w_vis_lo) {  // warp-uniform
      const bool masked = k0 + kKeys - 1 > w_lo || (p.window > 0 && k0 < w_vis_hi);
      const uint32_t stage_bytes = stage * 2 * kTileHalves * 2;
      AttendKeyTile<kDim>(k_lane + stage_bytes, v_lane + stage_bytes, k0, masked, qp, p.window, qa,
                          o, m, l);
    }
    __syncthreads();  // every warp done with this stage before iteration t + 1 refills it
  }

  if (!warp_active) return;
  const int tig = lane & 3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];
    sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
    sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 2);
    // sum >= 1: the row sees at least its own position, and its largest score adds exp2(0).
    if (16 * warp + (lane >> 2) + 8 * r >= tile.count) continue;  // a clamped repeat row
    const float inv = 1.0f / sum;
    // The head gate as HeadGateCuda applies it to the stored output: (o * inv) * s, s = 1 exact.
    const float s = p.gate != nullptr ? Sigmoid(p.gate[q_row[r] * p.gate_stride + h]) : 1.0f;
    float* out = p.out + q_row[r] * p.out_stride + static_cast<int64_t>(h) * kDim + 2 * tig;
#pragma unroll
    for (int dt = 0; dt < kDim / 8; ++dt) {
      out[8 * dt] = o[dt][2 * r] * inv * s;
      out[8 * dt + 1] = o[dt][2 * r + 1] * inv * s;
    }
  }
}

constexpr size_t SmemBytes(int dim) {
  return 4 * static_cast<size_t>(kKeys) * (dim + kPad) * 2 + 2 * kKeys * sizeof(int64_t);
}

template <int kDim, typename KvT, int kHeads>
cudaError_t Launch(const PrefillParams& p, dim3 grid, cudaStream_t stream) {
  auto* kernel = &PrefillAttentionKernel<kDim, KvT, kHeads>;
  constexpr size_t kSmem = SmemBytes(kDim);  // 70656 (128) / 103424 (192): above the 48 KB default
  static std::atomic<uint64_t> attribute_set{0};
  cudaError_t err = SetDynamicSharedOnce(kernel, kSmem, attribute_set);
  if (err != cudaSuccess) return err;
  err = LaunchWithPdl(kernel, grid, kThreads * kHeads, kSmem, stream, p);
  return err != cudaSuccess ? err : cudaGetLastError();
}

template <int kDim, int kHeads>
cudaError_t LaunchForType(KvDtype dtype, const PrefillParams& p, dim3 grid, cudaStream_t stream) {
  switch (dtype) {
    case KvDtype::kF16:
      return Launch<kDim, __half, kHeads>(p, grid, stream);
    case KvDtype::kQ8_0:
      return Launch<kDim, KvQ8, kHeads>(p, grid, stream);
    default:
      return Launch<kDim, float, kHeads>(p, grid, stream);
  }
}

// Two query heads per CTA sharing each K / V tile (where the group is even), on unless
// STEPSERVE_PREFILL_SHARED_KV=0 (read once). Measured on the H200 (session 26, results-v23.txt;
// 45 layers, alternating): prefill 2048 / 4096 tokens 8026 / 7698 and 7972 / 7734 -> 8176 / 7899
// and 8168 / 7899 tok/s with F32 pages (+2.2% / +2.4%), unchanged with F16 pages (8169 / 7937 ->
// 8183 / 7926); a full-attention layer's launch at 2048 tokens 852 -> 602 us under ncu.
bool SharedKvTiles() {
  static const bool on = EnvSwitchOn("STEPSERVE_PREFILL_SHARED_KV");
  return on;
}

// On unless STEPSERVE_PREFILL_ATTENTION=0 (the default since it was measured on the H200:
// 45-layer prefill 2048 tokens 1724 -> 2239 tok/s alone, 4865 with the grouped GEMM).
int SettingFromEnv() {
  const char* v = std::getenv("STEPSERVE_PREFILL_ATTENTION");
  return v != nullptr && v[0] == '0' ? 0 : 1;
}

std::atomic<int>& PrefillSetting() {
  static std::atomic<int> setting{SettingFromEnv()};
  return setting;
}

std::atomic<int64_t> g_launches{0};

}  // namespace

bool PrefillAttentionCudaSupports(const PagedKv& kv) {
  if (kv.head_dim != 128 && kv.head_dim != 192) return false;
  const auto k = reinterpret_cast<uintptr_t>(kv.k), v = reinterpret_cast<uintptr_t>(kv.v);
  switch (kv.dtype) {
    case KvDtype::kF32:
    case KvDtype::kF16:
      return k % 16 == 0 && v % 16 == 0;
    case KvDtype::kQ8_0:
      return k % 2 == 0 && v % 2 == 0;
  }
  return false;
}

bool PrefillAttentionCudaEnabled() { return PrefillSetting().load(std::memory_order_relaxed) != 0; }

bool SetPrefillAttentionCuda(bool enabled) {
  return PrefillSetting().exchange(enabled ? 1 : 0) != 0;
}

int64_t PrefillAttentionCudaLaunches() { return g_launches.load(std::memory_order_relaxed); }

KernelStatus PrefillAttentionCuda(const PagedAttentionCudaArgs& a,
                                  const PrefillTileCuda* device_tiles, int64_t n_tiles,
                                  cudaStream_t stream) {
  // The head gate here is applied per output row in the epilogue: the combine-kernel conditions
  // of the shared validation (split-K, int8 rows) do not apply; the int8 rows are not written.
  PagedAttentionCudaArgs ungated = a;
  ungated.gate = nullptr;
  ungated.gate_stride = 0;
  if (KernelStatus s = ValidatePagedAttentionCudaArgs(ungated); s != KernelStatus::kOk) return s;
  if (a.gate != nullptr &&
      (a.gate_stride < a.heads || a.q8_natural != nullptr || a.q8_pair != nullptr)) {
    return KernelStatus::kInvalidArgument;
  }
  if (!PrefillAttentionCudaSupports(a.kv)) return KernelStatus::kUnsupportedType;
  if (n_tiles < 0 || (n_tiles > 0 && (device_tiles == nullptr || a.n_rows == 0))) {
    return KernelStatus::kInvalidArgument;
  }
  if (n_tiles == 0) return KernelStatus::kOk;
  // Grid limits (x: 2^31 - 1 tiles, y: 65535 heads) and the int32 positions / rows of the kernel.
  if (n_tiles > 0x7FFFFFFF || a.heads > 65535) return KernelStatus::kTooLarge;
  const PagedKv& kv = a.kv;
  PrefillParams p{};
  p.q = a.q;
  p.q_stride = a.q_stride;
  p.out = a.out;
  p.out_stride = a.out_stride;
  p.rows = a.rows;
  p.n_rows = a.n_rows;
  p.tables = a.block_tables;
  p.tiles = device_tiles;
  p.n_tiles = static_cast<int>(n_tiles);
  p.k_cache = kv.k;
  p.v_cache = kv.v;
  p.num_blocks = kv.num_blocks;
  p.block_size = static_cast<int>(kv.block_size);
  p.kv_heads = static_cast<int>(kv.kv_heads);
  p.group = static_cast<int>(a.heads / kv.kv_heads);
  // Positions are int32, so a window of 2^31 or more hides nothing: the same as none.
  p.window = a.window > 0x7FFFFFFF ? 0 : static_cast<int>(a.window);
  p.scale_log2 = a.scale * kLog2e;
  p.gate = a.gate;
  p.gate_stride = a.gate_stride;
  const bool pair = SharedKvTiles() && p.group % 2 == 0;
  const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(a.heads / (pair ? 2 : 1)));
  cudaError_t err;
  if (kv.head_dim == 128) {
    err = pair ? LaunchForType<128, 2>(kv.dtype, p, grid, stream)
               : LaunchForType<128, 1>(kv.dtype, p, grid, stream);
  } else {
    err = pair ? LaunchForType<192, 2>(kv.dtype, p, grid, stream)
               : LaunchForType<192, 1>(kv.dtype, p, grid, stream);
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return KernelStatus::kInvalidArgument;
  }
  g_launches.fetch_add(1, std::memory_order_relaxed);
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
