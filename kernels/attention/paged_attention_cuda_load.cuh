// Loaders of the CUDA paged-attention kernel (paged_attention_cuda.cu; include from .cu files
// only): the cache offsets of a chunk's keys through the block table, and K / V of a chunk into
// shared memory as F32 - F32 / F16 pages element-wise or with 16-byte loads, Q8_0 pages a quarter
// block per task, dequantized in registers to the F32 products scale * int8.
#ifndef STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_LOAD_CUH_
#define STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_LOAD_CUH_

#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/attention/paged_attention_cuda_params.cuh"

namespace stepserve::kernels::paged_attention_cuda {

// Element type tag of Q8_0 pages: a head vector is head_dim / 32 blocks of 34 bytes (F16 scale,
// 32 int8), so rows are addressed in bytes and only 2-byte aligned.
struct KvQ8 {};

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }

// Values off..off + 7 (off a multiple of 8) of a Q8_0 block: its F16 scale and the 8 int8 values
// as four 16-bit words (the block is only 2-byte aligned; bytes in little-endian order), loaded by
// LoadQ8Eight and turned into scale * int8 by DequantQ8Eight - the same single F32 product as
// engine/quant's DequantQ8_0, so both backends read identical values.
struct Q8Eight {
  uint16_t scale;
  uint16_t pairs[4];
};

__device__ __forceinline__ Q8Eight LoadQ8Eight(const uint8_t* block, int off) {
  Q8Eight q;
  q.scale = __ldg(reinterpret_cast<const uint16_t*>(block));
  const uint16_t* qs = reinterpret_cast<const uint16_t*>(block + 2 + off);
#pragma unroll
  for (int i = 0; i < 4; ++i) q.pairs[i] = __ldg(qs + i);
  return q;
}

__device__ __forceinline__ void DequantQ8Eight(const Q8Eight& q, float* out) {
  const float scale = __half2float(__ushort_as_half(q.scale));
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = static_cast<float>(static_cast<int8_t>(q.pairs[i] & 0xFF)) * scale;
    out[2 * i + 1] = static_cast<float>(static_cast<int8_t>(q.pairs[i] >> 8)) * scale;
  }
}

// Offset (elements; bytes for Q8_0) of (position, KV head g, dim 0) in the cache, given the
// position's block-table entry `page`, or -1 when that is not a real page (never the case after
// host validation; guards memory safety). The Q8_0 vector size is derived here rather than kept
// in KernelParams: a field there changes the struct's layout, and with it ptxas' register
// allocation of the F32 / F16 kernels (one more field cost them 17-39 registers and a spill).
template <typename KvT, int kDim>
__device__ __forceinline__ int64_t KeyBaseInPage(const KernelParams& p, const Geometry<kDim>& geo,
                                                 int64_t page, int position, int g) {
  if (page < 0 || page >= p.num_blocks) return -1;
  const int64_t slot = page * p.block_size + position % p.block_size;
  if constexpr (std::is_same_v<KvT, KvQ8>) {
    return (slot * p.kv_heads + g) * (geo.head_dim / kKvQ8BlockElems * kKvQ8BlockBytes);
  } else {
    return (slot * p.kv_heads + g) * geo.head_dim;
  }
}

// The same, reading the entry from the sequence's block table.
template <typename KvT, int kDim>
__device__ __forceinline__ int64_t KeyBase(const KernelParams& p, const Geometry<kDim>& geo,
                                           const int32_t* table, int position, int g) {
  return KeyBaseInPage<KvT>(p, geo, table[position / p.block_size], position, g);
}

// Warp 0: the cache offsets of the chunk's keys [c0, min(c0 + kChunk, hi)), -1 past the end.
template <typename KvT, int kDim>
__device__ __forceinline__ void ChunkBases(const KernelParams& p, const Geometry<kDim>& geo,
                                           const int32_t* table, int64_t c0, int64_t hi, int g,
                                           int64_t* base_s) {
  const int lane = threadIdx.x & 31;
  base_s[lane] = c0 + lane < hi ? KeyBase<KvT>(p, geo, table, static_cast<int>(c0 + lane), g) : -1;
}

// ChunkBases in two halves, so that the table read can overlap other work: ChunkPage loads the
// lane's table entry of the chunk at c0 (-1 past hi), ChunkBasesFromPage turns it into the offset.
__device__ __forceinline__ int32_t ChunkPage(const KernelParams& p, const int32_t* table,
                                             int64_t c0, int64_t hi) {
  const int64_t position = c0 + (threadIdx.x & 31);
  return position < hi ? table[static_cast<int>(position) / p.block_size] : -1;
}

template <typename KvT, int kDim>
__device__ __forceinline__ void ChunkBasesFromPage(const KernelParams& p, const Geometry<kDim>& geo,
                                                   int32_t page, int64_t c0, int64_t hi, int g,
                                                   int64_t* base_s) {
  const int lane = threadIdx.x & 31;
  base_s[lane] =
      c0 + lane < hi ? KeyBaseInPage<KvT>(p, geo, page, static_cast<int>(c0 + lane), g) : -1;
}

// F32 / F16 pages: 16-byte loads when the rows allow them, else one element at a time.
// The vector path issues kLoadBatch loads of K and of V per thread before storing any: one
// thread's copies of a chunk (8 pairs for F32 at head_dim 128) then cost one DRAM round trip
// instead of one each - the loop stored each pair before loading the next, so a decode split's
// chunk was ~8 dependent round trips (ncu, H200: 37 us for 256 keys in 4 splits of 2 chunks).
// The cache is read through the non-coherent path: no kernel writes it while this one runs.
constexpr int kLoadBatch = 8;

template <typename KvT, int kDim>
__device__ void LoadChunkElements(const KernelParams& p, const Geometry<kDim>& geo,
                                  const int64_t* base_s, float* k_s, float* v_s) {
  const KvT* k_cache = static_cast<const KvT*>(p.k_cache);
  const KvT* v_cache = static_cast<const KvT*>(p.v_cache);
  if (p.vector_loads) {
    constexpr int kVec = 16 / sizeof(KvT);  // 4 floats or 8 halves per 16-byte load
    const int per_row = geo.head_dim / kVec;
    const int total = kChunk * per_row;
    union Vec {
      uint4 raw;
      KvT e[kVec];
    };
    for (int idx0 = threadIdx.x; idx0 < total; idx0 += kThreads * kLoadBatch) {
      Vec kb[kLoadBatch], vb[kLoadBatch];
#pragma unroll
      for (int b = 0; b < kLoadBatch; ++b) {
        const int idx = idx0 + b * kThreads;
        kb[b].raw = make_uint4(0, 0, 0, 0);
        vb[b].raw = kb[b].raw;
        if (idx < total) {
          const int j = idx / per_row;
          const int64_t base = base_s[j];
          if (base >= 0) {
            const int d = (idx - j * per_row) * kVec;
            kb[b].raw = __ldg(reinterpret_cast<const uint4*>(k_cache + base + d));
            vb[b].raw = __ldg(reinterpret_cast<const uint4*>(v_cache + base + d));
          }
        }
      }
#pragma unroll
      for (int b = 0; b < kLoadBatch; ++b) {
        const int idx = idx0 + b * kThreads;
        if (idx < total) {
          const int j = idx / per_row;
          const int d = (idx - j * per_row) * kVec;
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            k_s[j * geo.k_stride + d + e] = ToFloat(kb[b].e[e]);
            v_s[j * geo.dims_padded + d + e] = ToFloat(vb[b].e[e]);
          }
        }
      }
    }
    return;
  }
  for (int idx = threadIdx.x; idx < kChunk * geo.dims_padded; idx += kThreads) {
    const int j = idx / geo.dims_padded;
    const int d = idx - j * geo.dims_padded;
    const int64_t base = base_s[j];
    float kx = 0.0f, vx = 0.0f;
    if (base >= 0 && d < geo.head_dim) {
      kx = ToFloat(k_cache[base + d]);
      vx = ToFloat(v_cache[base + d]);
    }
    k_s[j * geo.k_stride + d] = kx;
    v_s[j * geo.dims_padded + d] = vx;
  }
}

// Q8_0 pages: one task per 8 values of a key (a quarter of a block): its scale and 8 int8 of K
// and of V. head_dim is a multiple of 32, so there are no padding dims and no partial blocks. As
// in LoadChunkElements, a thread loads kQ8Batch tasks before storing any (one round trip).
constexpr int kQ8Batch = 4;

template <int kDim>
__device__ void LoadChunkQ8(const KernelParams& p, const Geometry<kDim>& geo, const int64_t* base_s,
                            float* k_s, float* v_s) {
  const uint8_t* k_cache = static_cast<const uint8_t*>(p.k_cache);
  const uint8_t* v_cache = static_cast<const uint8_t*>(p.v_cache);
  const int per_row = geo.head_dim / 8;
  const int total = kChunk * per_row;
  for (int idx0 = threadIdx.x; idx0 < total; idx0 += kThreads * kQ8Batch) {
    Q8Eight kq[kQ8Batch], vq[kQ8Batch];
#pragma unroll
    for (int b = 0; b < kQ8Batch; ++b) {
      const int idx = idx0 + b * kThreads;
      kq[b] = vq[b] = Q8Eight{};  // zeros: a missing key reads as 0 * 0
      if (idx < total) {
        const int j = idx / per_row;
        const int d = (idx - j * per_row) * 8;
        const int64_t base = base_s[j];
        if (base >= 0) {
          const int64_t block = base + d / kKvQ8BlockElems * kKvQ8BlockBytes;
          const int off = static_cast<int>(d % kKvQ8BlockElems);
          kq[b] = LoadQ8Eight(k_cache + block, off);
          vq[b] = LoadQ8Eight(v_cache + block, off);
        }
      }
    }
#pragma unroll
    for (int b = 0; b < kQ8Batch; ++b) {
      const int idx = idx0 + b * kThreads;
      if (idx >= total) continue;
      const int j = idx / per_row;
      const int d = (idx - j * per_row) * 8;
      float kx[8], vx[8];
      DequantQ8Eight(kq[b], kx);
      DequantQ8Eight(vq[b], vx);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        k_s[j * geo.k_stride + d + e] = kx[e];
        v_s[j * geo.dims_padded + d + e] = vx[e];
      }
    }
  }
}

// K and V of the chunk (offsets in base_s) into k_s / v_s; missing keys and the padding dims
// become zeros, so later loops may run over whole rows and whole chunks.
template <typename KvT, int kDim>
__device__ __forceinline__ void LoadChunk(const KernelParams& p, const Geometry<kDim>& geo,
                                          const int64_t* base_s, float* k_s, float* v_s) {
  if constexpr (std::is_same_v<KvT, KvQ8>) {
    LoadChunkQ8(p, geo, base_s, k_s, v_s);
  } else {
    LoadChunkElements<KvT>(p, geo, base_s, k_s, v_s);
  }
}

}  // namespace stepserve::kernels::paged_attention_cuda

#endif  // STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_LOAD_CUH_
