// The decode attention on tensor cores (paged_attention_cuda.cu launches it behind
// STEPSERVE_ATTN_MMA_DECODE; include from .cu files only). Same grid, key ranges, split-K
// partials and combine as PagedAttentionKernel; F16 MMA inputs (Q, K, P, V rounded to F16, F32
// accumulation), so relative output errors of order 1e-3 as with the prefill kernel.
//
// CTA = (query row, KV head, split), 4 warps, the whole GQA group (up to 16 query heads) as the
// 16 rows of the MMA. The warps split the head dims, not the keys: warp w owns dims
// [w * kDim / 4, (w + 1) * kDim / 4). Per chunk of kChunk = 32 keys:
//   each lane loads its share of the chunk's K and V straight from the cache into registers
//   (no shared-memory staging; the next chunk's loads are issued before this chunk's math);
//   S_w = Q[:, dims of w] K[:, dims of w]^T on mma.m16n8k16 (16 heads x 32 keys, 4 n-tiles);
//   the four partial S go through shared memory and every warp adds them in the same order, so
//   all warps hold the same S and run the same online softmax (log2 domain, exp2) - no
//   cross-warp combine at the end and one barrier per chunk (the exchange is double-buffered);
//   O_w^T += V[:, dims of w]^T P^T on mma.m16n8k16 (dims as rows, heads as columns: V's rows
//   need no transpose through shared memory - a lane's two keys of one dim are a byte permute
//   of its own loads).
// Dim permutations, free because Q, K and V are loaded per lane: in k-step kk of S, the MMA's
// k index 2tig + e (e = 0, 1) is dim 16kk + 4tig + e of the warp's range and 2tig + 8 + e is
// 16kk + 4tig + 2 + e, so a lane's four K values of one key are consecutive (one 16- or 8-byte
// load). In O^T's dim-tile t, row gid is dim 2 kSteps gid + 2t and row gid + 8 the dim after it,
// so a lane loads kSteps pairs of consecutive dims per key.
#ifndef STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_MMA_CUH_
#define STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_MMA_CUH_

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention/attention_mma.cuh"
#include "kernels/attention/paged_attention_cuda_load.cuh"
#include "kernels/attention/paged_attention_cuda_params.cuh"
#include "kernels/common/pdl.cuh"

namespace stepserve::kernels::paged_attention_cuda {

constexpr float kMmaLog2e = 1.4426950408889634f;
constexpr float kMmaLn2 = 0.6931471805599453f;

// Two consecutive cache values as loaded: F32 pages a float2, F16 pages their half2 bits.
template <typename KvT>
struct MmaPair {
  using Type = float2;
};
template <>
struct MmaPair<__half> {
  using Type = uint32_t;
};

// kPairs pairs of values from element `offset` of the vector at `base` (zeros when base < 0: a
// key past the range). Even kPairs: 16-byte (F32) / 8-byte (F16) loads - the caller's offsets
// are multiples of 4 then; odd: one pair a load.
template <typename KvT, int kPairs>
__device__ __forceinline__ void LoadPairs(const void* cache, int64_t base, int offset,
                                          typename MmaPair<KvT>::Type (&out)[kPairs]) {
  if (base < 0) {
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
      if constexpr (std::is_same_v<KvT, float>) {
        out[i] = make_float2(0.0f, 0.0f);
      } else {
        out[i] = 0u;
      }
    }
    return;
  }
  const KvT* src = static_cast<const KvT*>(cache) + base + offset;
  if constexpr (kPairs % 2 == 0) {
#pragma unroll
    for (int i = 0; i < kPairs / 2; ++i) {
      if constexpr (std::is_same_v<KvT, float>) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(src) + i);
        out[2 * i] = make_float2(v.x, v.y);
        out[2 * i + 1] = make_float2(v.z, v.w);
      } else {
        const uint2 v = __ldg(reinterpret_cast<const uint2*>(src) + i);
        out[2 * i] = v.x;
        out[2 * i + 1] = v.y;
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
      if constexpr (std::is_same_v<KvT, float>) {
        out[i] = __ldg(reinterpret_cast<const float2*>(src) + i);
      } else {
        out[i] = __ldg(reinterpret_cast<const uint32_t*>(src) + i);
      }
    }
  }
}

// A pair as one F16x2 register (first value low).
__device__ __forceinline__ uint32_t PackPair(float2 x) {
  return attention_mma::PackHalf2(x.x, x.y);
}
__device__ __forceinline__ uint32_t PackPair(uint32_t x) { return x; }

// Two keys' pairs (the same two dims) regrouped by dim: `first` = (key0's first value, key1's
// first value), `second` = the second values - an A-fragment register of O^T = V^T P^T each.
__device__ __forceinline__ void ByDim(float2 key0, float2 key1, uint32_t& first, uint32_t& second) {
  first = attention_mma::PackHalf2(key0.x, key1.x);
  second = attention_mma::PackHalf2(key0.y, key1.y);
}
__device__ __forceinline__ void ByDim(uint32_t key0, uint32_t key1, uint32_t& first,
                                      uint32_t& second) {
  first = __byte_perm(key0, key1, 0x5410);   // low halves: key0 low, key1 high
  second = __byte_perm(key0, key1, 0x7632);  // high halves
}

// Resident CTAs a multiprocessor the register bound of each form keeps: the raw loads of an F16
// page take half the registers of an F32 one. ptxas (sm_90a, session 39), none spilling: F32 128
// at 168 registers (3), F16 128 at 128 (4; 133-143 unbounded), F32 192 at 231-241 (2), F16 192
// at 163-167 (3; 167-172 unbounded).
template <typename KvT, int kDim>
constexpr int MmaDecodeMinCtas() {
  constexpr bool kF16 = std::is_same_v<KvT, __half>;
  return kDim == 128 ? (kF16 ? 4 : 3) : (kF16 ? 3 : 2);
}

// kDim: 128 or 192 (a multiple of 64: 16 dims per k-step and per warp quarter); kHeadTiles: 1
// when the group has at most 8 heads (O^T's head columns 0-7), 2 up to 16. The host launches it
// only for F32 / F16 pages with vector loads, groups up to 16, 16-byte aligned Q rows and
// 8-byte aligned output rows (PagedAttentionCudaMmaSupports).
//
// Registers bound occupancy here (ncu, H100, session 38: 136 / 182 registers, 3 / 2 CTAs a
// multiprocessor, 18% / 12% achieved occupancy, DRAM at 39-44%), hence MmaDecodeMinCtas (no
// spill with the next chunk's V loads issued after the scores).
template <typename KvT, int kDim, int kHeadTiles>
__global__ void __launch_bounds__(kThreads, MmaDecodeMinCtas<KvT, kDim>())
    DecodeAttentionMmaKernel(const KernelParams p) {
  using attention_mma::MmaF16;
  using attention_mma::PackHalf2;
  using Pair = typename MmaPair<KvT>::Type;
  constexpr int kWarpDims = kDim / kWarps;
  constexpr int kSteps = kWarpDims / 16;  // k-steps of S; dim tiles of O^T; V pairs per key
  constexpr int kKeyTiles = kChunk / 8;   // n-tiles of S
  static_assert(kChunk == 32 && kWarps == 4 && kWarpDims % 16 == 0);
  static_assert(kHeadTiles == 1 || kHeadTiles == 2);
  // The partial S of every warp, two buffers (chunk parity): float4 per lane and n-tile.
  __shared__ float4 s_part[2][kWarps][kKeyTiles][32];
  __shared__ int64_t base_all[kWarps][kChunk];  // each warp's own copy of the chunk's offsets

  if (!p.tables_before_wait) {
    WaitForPrimaryGrid();
    AllowDependentLaunch();
  }
  const Geometry<kDim> geo(p);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int gid = lane >> 2;
  const int tig = lane & 3;
  const unsigned cta = blockIdx.x;
  const unsigned w32 = cta / static_cast<unsigned>(p.kv_heads);
  const int g = static_cast<int>(cta - w32 * static_cast<unsigned>(p.kv_heads));
  const int64_t w = w32;
  const int split = blockIdx.y;
  const int head0 = g * p.group;
  const int nh = p.group;

  const PagedAttentionCudaRow row = p.rows[w];
  const int64_t position = row.position;
  const int64_t first = p.window > 0 ? max(int64_t{0}, position - p.window + 1) : 0;
  int64_t lo = first;
  int64_t hi = position + 1;
  if (p.splits > 1) {  // the same ranges as PagedAttentionKernel
    const int64_t span = hi - lo;
    const int64_t per = ((span + p.splits - 1) / p.splits + kChunk - 1) / kChunk * kChunk;
    lo = min(hi, first + split * per);
    hi = min(hi, lo + per);
  }
  const int32_t* table = p.tables + row.table_offset;
  int64_t* bases = base_all[warp];
  const int32_t page0 = ChunkPage(p, table, lo, hi);
  if (p.tables_before_wait) {
    WaitForPrimaryGrid();  // Q and the newest keys come from the kernels before
    AllowDependentLaunch();
  }

  const int dim0 = warp * kWarpDims;
  // Q (times scale * log2 e) as A fragments: rows gid and gid + 8 are heads head0 + gid, + 8.
  uint32_t qa[kSteps][4];
  {
    const float* q = p.q + static_cast<int64_t>(row.q_row) * p.q_stride +
                     static_cast<int64_t>(head0) * kDim + dim0 + 4 * tig;
    const float sc = p.scale * kMmaLog2e;
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      const float4 a = gid < nh ? *reinterpret_cast<const float4*>(q + gid * kDim + 16 * kk) : z;
      const float4 b = kHeadTiles == 2 && gid + 8 < nh
                           ? *reinterpret_cast<const float4*>(q + (gid + 8) * kDim + 16 * kk)
                           : z;
      qa[kk][0] = PackHalf2(a.x * sc, a.y * sc);
      qa[kk][1] = PackHalf2(b.x * sc, b.y * sc);
      qa[kk][2] = PackHalf2(a.z * sc, a.w * sc);
      qa[kk][3] = PackHalf2(b.z * sc, b.w * sc);
    }
  }

  // This lane's raw share of a chunk: K of keys 8 nt + gid (4 dims a k-step) and V of keys
  // 16 ks + {2tig, 2tig + 1, 2tig + 8, 2tig + 9} (slot 4 ks + j; kSteps pairs each).
  Pair k_raw[kKeyTiles][kSteps][2];
  Pair v_raw[8][kSteps];
  auto load_k = [&]() {
#pragma unroll
    for (int nt = 0; nt < kKeyTiles; ++nt) {
      const int64_t base = bases[8 * nt + gid];
#pragma unroll
      for (int kk = 0; kk < kSteps; ++kk) {
        LoadPairs<KvT, 2>(p.k_cache, base, dim0 + 16 * kk + 4 * tig, k_raw[nt][kk]);
      }
    }
  };
  auto load_v = [&]() {
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      const int key = 16 * (s >> 2) + 2 * tig + (s & 1) + 8 * ((s >> 1) & 1);
      LoadPairs<KvT, kSteps>(p.v_cache, bases[key], dim0 + 2 * kSteps * gid, v_raw[s]);
    }
  };

  float o[kSteps][kHeadTiles][4];
#pragma unroll
  for (int t = 0; t < kSteps; ++t) {
#pragma unroll
    for (int u = 0; u < kHeadTiles; ++u) o[t][u][0] = o[t][u][1] = o[t][u][2] = o[t][u][3] = 0.0f;
  }
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};  // this lane's share of the row sums (the quad adds them at the end)

  if (lo < hi) {
    ChunkBasesFromPage<KvT>(p, geo, page0, lo, hi, g, bases);
    __syncwarp();
    load_k();
    load_v();
  }
  int buf = 0;
#pragma unroll 1
  for (int64_t c0 = lo; c0 < hi; c0 += kChunk) {
    const int n = static_cast<int>(min(int64_t{kChunk}, hi - c0));
    const bool next = c0 + kChunk < hi;
    const int32_t next_page = next ? ChunkPage(p, table, c0 + kChunk, hi) : -1;
    uint32_t kb[kKeyTiles][kSteps][2];
    uint32_t va[kSteps][2][4];  // [dim tile][key step][A register]
#pragma unroll
    for (int nt = 0; nt < kKeyTiles; ++nt) {
#pragma unroll
      for (int kk = 0; kk < kSteps; ++kk) {
        kb[nt][kk][0] = PackPair(k_raw[nt][kk][0]);
        kb[nt][kk][1] = PackPair(k_raw[nt][kk][1]);
      }
    }
#pragma unroll
    for (int t = 0; t < kSteps; ++t) {
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        ByDim(v_raw[4 * ks][t], v_raw[4 * ks + 1][t], va[t][ks][0], va[t][ks][1]);
        ByDim(v_raw[4 * ks + 2][t], v_raw[4 * ks + 3][t], va[t][ks][2], va[t][ks][3]);
      }
    }
    // The next chunk's loads fly during this chunk's math: K's now, V's once this chunk's K
    // fragments are dead (after the scores), so the raw values of both are never live beside
    // both packed sets (F32 pages: 64 raw registers).
    if (next) {
      __syncwarp();  // every lane has read this chunk's offsets
      ChunkBasesFromPage<KvT>(p, geo, next_page, c0 + kChunk, hi, g, bases);
      __syncwarp();
      load_k();
    }

    // This warp's dims of S, then the sum of the four warps' parts (the same order everywhere).
    float s[kKeyTiles][4];
#pragma unroll
    for (int nt = 0; nt < kKeyTiles; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kSteps; ++kk) MmaF16(s[nt], qa[kk], kb[nt][kk][0], kb[nt][kk][1]);
      s_part[buf][warp][nt][lane] = make_float4(s[nt][0], s[nt][1], s[nt][2], s[nt][3]);
    }
    // One barrier a chunk: buffer `buf` is written again two chunks later, after every warp has
    // passed the next chunk's barrier and so finished reading it here.
    __syncthreads();
#pragma unroll
    for (int nt = 0; nt < kKeyTiles; ++nt) {
      float4 sum = s_part[buf][0][nt][lane];
#pragma unroll
      for (int v = 1; v < kWarps; ++v) {
        const float4 part = s_part[buf][v][nt][lane];
        sum.x += part.x;
        sum.y += part.y;
        sum.z += part.z;
        sum.w += part.w;
      }
      const int key = 8 * nt + 2 * tig;  // c0 / c2: key, c1 / c3: key + 1
      s[nt][0] = key < n ? sum.x : -INFINITY;
      s[nt][1] = key + 1 < n ? sum.y : -INFINITY;
      s[nt][2] = key < n ? sum.z : -INFINITY;
      s[nt][3] = key + 1 < n ? sum.w : -INFINITY;
    }
    buf ^= 1;
    if (next) load_v();

    // Online softmax of rows gid (r = 0) and gid + 8 (r = 1); the quad holds a row's 32 scores.
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
      const float m_new = fmaxf(m[r], mx);  // finite: a chunk holds at least one key
      alpha[r] = exp2f(m[r] - m_new);       // 0 on the first chunk
      m[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt) {
        s[nt][2 * r] = exp2f(s[nt][2 * r] - m_new);
        s[nt][2 * r + 1] = exp2f(s[nt][2 * r + 1] - m_new);
        sum += s[nt][2 * r] + s[nt][2 * r + 1];
      }
      l[r] = l[r] * alpha[r] + sum;
    }
    // O^T's columns are heads 8u + 2tig (+1): their factors come from lanes 4 (2tig) (+4).
#pragma unroll
    for (int u = 0; u < kHeadTiles; ++u) {
      const float a0 = __shfl_sync(0xFFFFFFFFu, alpha[u], 8 * tig);
      const float a1 = __shfl_sync(0xFFFFFFFFu, alpha[u], 8 * tig + 4);
#pragma unroll
      for (int t = 0; t < kSteps; ++t) {
        o[t][u][0] *= a0;
        o[t][u][1] *= a1;
        o[t][u][2] *= a0;
        o[t][u][3] *= a1;
      }
    }
    // O^T += V^T P^T: key step ks is S's n-tiles 2ks, 2ks + 1; head tile u is S's rows 8u + gid.
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
#pragma unroll
      for (int u = 0; u < kHeadTiles; ++u) {
        const uint32_t b0 = PackHalf2(s[2 * ks][2 * u], s[2 * ks][2 * u + 1]);
        const uint32_t b1 = PackHalf2(s[2 * ks + 1][2 * u], s[2 * ks + 1][2 * u + 1]);
#pragma unroll
        for (int t = 0; t < kSteps; ++t) MmaF16(o[t][u], va[t][ks], b0, b1);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xFFFFFFFFu, l[r], 1);
    l[r] += __shfl_xor_sync(0xFFFFFFFFu, l[r], 2);
  }
  const int d_lane = dim0 + 2 * kSteps * gid;  // dim of row gid in dim tile 0
#pragma unroll
  for (int u = 0; u < kHeadTiles; ++u) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float sum = __shfl_sync(0xFFFFFFFFu, l[u], 4 * (2 * tig + e));
      const int h = 8 * u + 2 * tig + e;
      if (h >= nh) continue;
      float* dst;
      float mul = 1.0f;
      if (p.splits == 1) {
        dst = p.out + static_cast<int64_t>(row.q_row) * p.out_stride +
              static_cast<int64_t>(head0 + h) * kDim;
        mul = 1.0f / sum;  // sum >= 1: the row's own position is visible
      } else {
        const int64_t part = (w * p.heads + head0 + h) * p.splits + split;
        dst = p.part_acc + part * kDim;
      }
#pragma unroll
      for (int t = 0; t < kSteps; ++t) {
        *reinterpret_cast<float2*>(dst + d_lane + 2 * t) =
            make_float2(o[t][u][e] * mul, o[t][u][e + 2] * mul);
      }
    }
  }
  if (p.splits > 1 && warp == 0 && tig == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int h = gid + 8 * r;
      if (h < nh) {
        const int64_t part = (w * p.heads + head0 + h) * p.splits + split;
        p.part_max[part] = m[r] * kMmaLn2;  // natural units, as the combine reads them
        p.part_sum[part] = l[r];
      }
    }
  }
}

}  // namespace stepserve::kernels::paged_attention_cuda

#endif  // STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_MMA_CUH_
