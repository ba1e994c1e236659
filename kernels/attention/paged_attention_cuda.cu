// CUDA paged attention (paged_attention_cuda.h): the per-(row, KV head) online-softmax kernel, the
// split-K combine kernel and the entry point.
//
// Per CTA (kThreads threads, one query row, one KV head g, up to kHeadsPerCta query heads of its
// GQA group, one key range):
//   Q of those heads -> shared (F32, zero-padded to a multiple of 4 dims);
//   for each chunk of kChunk positions in the range:
//     K, V rows of the chunk -> shared (F32; positions past the range read as zeros; F16 and Q8_0
//       pages are converted on the way, Q8_0 as scale * int8 in registers);
//     scores: lane j of warp w scores key j against heads w, w + 4, ... (a warp owns its heads
//       for the whole range, so running max / sum live in its registers, replicated per lane);
//       chunk max, rescale factor and probabilities by warp reductions;
//     accumulate: thread t owns dims t, t + kThreads, ... of every head: acc = acc * rescale +
//       sum_j p_j V_j.
//   Single pass: out = acc / sum. Split-K: (acc, max, sum) go to scratch and the combine kernel
//   rescales the partials to the common max.
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention/paged_attention_cuda.h"
#include "kernels/common/cuda_reduce.cuh"
#include "kernels/common/pdl.cuh"

namespace stepserve::kernels {
namespace {

using cuda_reduce::WarpMax;
using cuda_reduce::WarpSum;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 32;  // keys per chunk: one per lane in the score phase
constexpr int kHeadsPerCta = 16;
constexpr int kHeadsPerWarp = kHeadsPerCta / kWarps;
constexpr int kCombineThreads = 128;

struct KernelParams {
  const float* q;
  int64_t q_stride;
  float* out;
  int64_t out_stride;
  const PagedAttentionCudaRow* rows;
  const int32_t* tables;
  const void* k_cache;
  const void* v_cache;
  int64_t num_blocks;
  int block_size;
  int kv_heads;
  int head_dim;
  int dims_padded;  // head_dim rounded up to 4 (Q and V rows in shared)
  int k_stride;     // floats between K rows in shared (padded against bank conflicts)
  int heads;
  int group;      // query heads per KV head
  int passes;     // CTAs per (row, KV head) when the group exceeds kHeadsPerCta
  int cta_heads;  // min(group, kHeadsPerCta): shared-memory rows for Q and probabilities
  int64_t window;
  float scale;
  int splits;
  bool vector_loads;  // head_dim a multiple of the 16-byte vector and the cache 16-byte aligned
  float* part_acc;    // split-K scratch: [rows][heads][splits][head_dim]
  float* part_max;    // [rows][heads][splits]
  float* part_sum;
};

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

// Offset (elements; bytes for Q8_0) of (position, KV head g, dim 0) in the cache, or -1 when the
// table entry is not a real page (never the case after host validation; guards memory safety).
// The Q8_0 vector size is derived here rather than kept in KernelParams: a field there changes
// the struct's layout, and with it ptxas' register allocation of the F32 / F16 kernels (one more
// field cost them 17-39 registers and a spill).
template <typename KvT>
__device__ __forceinline__ int64_t KeyBase(const KernelParams& p, const int32_t* table,
                                           int position, int g) {
  const int64_t page = table[position / p.block_size];
  if (page < 0 || page >= p.num_blocks) return -1;
  const int64_t slot = page * p.block_size + position % p.block_size;
  if constexpr (std::is_same_v<KvT, KvQ8>) {
    return (slot * p.kv_heads + g) * (p.head_dim / kKvQ8BlockElems * kKvQ8BlockBytes);
  } else {
    return (slot * p.kv_heads + g) * p.head_dim;
  }
}

// Warp 0: the cache offsets of the chunk's keys [c0, min(c0 + kChunk, hi)), -1 past the end.
template <typename KvT>
__device__ __forceinline__ void ChunkBases(const KernelParams& p, const int32_t* table, int64_t c0,
                                           int64_t hi, int g, int64_t* base_s) {
  const int lane = threadIdx.x & 31;
  base_s[lane] = c0 + lane < hi ? KeyBase<KvT>(p, table, static_cast<int>(c0 + lane), g) : -1;
}

// F32 / F16 pages: 16-byte loads when the rows allow them, else one element at a time.
// The vector path issues kLoadBatch loads of K and of V per thread before storing any: one
// thread's copies of a chunk (8 pairs for F32 at head_dim 128) then cost one DRAM round trip
// instead of one each - the loop stored each pair before loading the next, so a decode split's
// chunk was ~8 dependent round trips (ncu, H200: 37 us for 256 keys in 4 splits of 2 chunks).
// The cache is read through the non-coherent path: no kernel writes it while this one runs.
constexpr int kLoadBatch = 8;

template <typename KvT>
__device__ void LoadChunkElements(const KernelParams& p, const int64_t* base_s, float* k_s,
                                  float* v_s) {
  const KvT* k_cache = static_cast<const KvT*>(p.k_cache);
  const KvT* v_cache = static_cast<const KvT*>(p.v_cache);
  if (p.vector_loads) {
    constexpr int kVec = 16 / sizeof(KvT);  // 4 floats or 8 halves per 16-byte load
    const int per_row = p.head_dim / kVec;
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
            k_s[j * p.k_stride + d + e] = ToFloat(kb[b].e[e]);
            v_s[j * p.dims_padded + d + e] = ToFloat(vb[b].e[e]);
          }
        }
      }
    }
    return;
  }
  for (int idx = threadIdx.x; idx < kChunk * p.dims_padded; idx += kThreads) {
    const int j = idx / p.dims_padded;
    const int d = idx - j * p.dims_padded;
    const int64_t base = base_s[j];
    float kx = 0.0f, vx = 0.0f;
    if (base >= 0 && d < p.head_dim) {
      kx = ToFloat(k_cache[base + d]);
      vx = ToFloat(v_cache[base + d]);
    }
    k_s[j * p.k_stride + d] = kx;
    v_s[j * p.dims_padded + d] = vx;
  }
}

// Q8_0 pages: one task per 8 values of a key (a quarter of a block): its scale and 8 int8 of K
// and of V. head_dim is a multiple of 32, so there are no padding dims and no partial blocks. As
// in LoadChunkElements, a thread loads kQ8Batch tasks before storing any (one round trip).
constexpr int kQ8Batch = 4;

__device__ void LoadChunkQ8(const KernelParams& p, const int64_t* base_s, float* k_s, float* v_s) {
  const uint8_t* k_cache = static_cast<const uint8_t*>(p.k_cache);
  const uint8_t* v_cache = static_cast<const uint8_t*>(p.v_cache);
  const int per_row = p.head_dim / 8;
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
        k_s[j * p.k_stride + d + e] = kx[e];
        v_s[j * p.dims_padded + d + e] = vx[e];
      }
    }
  }
}

// K and V of the chunk (offsets in base_s) into k_s / v_s; missing keys and the padding dims
// become zeros, so later loops may run over whole rows and whole chunks.
template <typename KvT>
__device__ __forceinline__ void LoadChunk(const KernelParams& p, const int64_t* base_s, float* k_s,
                                          float* v_s) {
  if constexpr (std::is_same_v<KvT, KvQ8>) {
    LoadChunkQ8(p, base_s, k_s, v_s);
  } else {
    LoadChunkElements<KvT>(p, base_s, k_s, v_s);
  }
}

// kDimsPerThread: ceil(dims_padded / kThreads), the accumulator columns each thread owns.
template <typename KvT, int kDimsPerThread>
__global__ void __launch_bounds__(kThreads) PagedAttentionKernel(const KernelParams p) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  extern __shared__ float4 smem4[];
  float* q_s = reinterpret_cast<float*>(smem4);      // [cta_heads][dims_padded]
  float* k_s = q_s + p.cta_heads * p.dims_padded;    // [kChunk][k_stride]
  float* v_s = k_s + kChunk * p.k_stride;            // [kChunk][dims_padded]
  float* prob_s = v_s + kChunk * p.dims_padded;      // [cta_heads][kChunk]
  float* rescale_s = prob_s + p.cta_heads * kChunk;  // [kHeadsPerCta]
  float* max_s = rescale_s + kHeadsPerCta;           // [kHeadsPerCta]
  float* sum_s = max_s + kHeadsPerCta;               // [kHeadsPerCta]
  // [kChunk] cache offsets of the chunk's keys; 3 * kHeadsPerCta floats keep it 8-byte aligned.
  int64_t* base_s = reinterpret_cast<int64_t*>(sum_s + kHeadsPerCta);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int64_t cta = blockIdx.x;
  const int pass = static_cast<int>(cta % p.passes);
  const int g = static_cast<int>((cta / p.passes) % p.kv_heads);
  const int64_t w = cta / (static_cast<int64_t>(p.passes) * p.kv_heads);
  const int split = blockIdx.y;
  const int head0 = g * p.group + pass * kHeadsPerCta;
  const int nh = min(kHeadsPerCta, p.group - pass * kHeadsPerCta);

  const PagedAttentionCudaRow row = p.rows[w];
  const int64_t position = row.position;
  const int64_t first = p.window > 0 ? max(int64_t{0}, position - p.window + 1) : 0;
  int64_t lo = first;
  int64_t hi = position + 1;
  if (p.splits > 1) {
    // Whole chunks per split; trailing splits of a short row stay empty.
    const int64_t span = hi - lo;
    const int64_t per = ((span + p.splits - 1) / p.splits + kChunk - 1) / kChunk * kChunk;
    lo = min(hi, first + split * per);
    hi = min(hi, lo + per);
  }
  const int32_t* table = p.tables + row.table_offset;

  const float* q_row = p.q + static_cast<int64_t>(row.q_row) * p.q_stride;
  for (int idx = tid; idx < nh * p.dims_padded; idx += kThreads) {
    const int i = idx / p.dims_padded;
    const int d = idx - i * p.dims_padded;
    q_s[idx] = d < p.head_dim ? q_row[static_cast<int64_t>(head0 + i) * p.head_dim + d] : 0.0f;
  }

  float run_max[kHeadsPerWarp];
  float run_sum[kHeadsPerWarp];
#pragma unroll
  for (int t = 0; t < kHeadsPerWarp; ++t) {
    run_max[t] = -INFINITY;
    run_sum[t] = 0.0f;
  }
  float acc[kHeadsPerCta][kDimsPerThread];
#pragma unroll
  for (int i = 0; i < kHeadsPerCta; ++i) {
#pragma unroll
    for (int c = 0; c < kDimsPerThread; ++c) acc[i][c] = 0.0f;
  }

  if (warp == 0) ChunkBases<KvT>(p, table, lo, hi, g, base_s);
  __syncthreads();

  for (int64_t c0 = lo; c0 < hi; c0 += kChunk) {
    const int n = static_cast<int>(min(int64_t{kChunk}, hi - c0));
    LoadChunk<KvT>(p, base_s, k_s, v_s);
    __syncthreads();

    // Scores of key `lane` against this warp's heads, then the online-softmax update.
    float score[kHeadsPerWarp];
#pragma unroll
    for (int t = 0; t < kHeadsPerWarp; ++t) score[t] = 0.0f;
    const float* k_row = k_s + lane * p.k_stride;
    for (int d = 0; d < p.dims_padded; d += 4) {
      const float4 kv = *reinterpret_cast<const float4*>(k_row + d);
#pragma unroll
      for (int t = 0; t < kHeadsPerWarp; ++t) {
        const int i = warp + t * kWarps;
        if (i < nh) {
          const float4 qv = *reinterpret_cast<const float4*>(q_s + i * p.dims_padded + d);
          score[t] += qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kHeadsPerWarp; ++t) {
      const int i = warp + t * kWarps;
      if (i < nh) {  // warp-uniform
        const float s = lane < n ? score[t] * p.scale : -INFINITY;
        const float new_max = fmaxf(run_max[t], WarpMax(s));  // finite: n >= 1
        const float rescale = expf(run_max[t] - new_max);     // 0 on the first chunk
        const float prob = lane < n ? expf(s - new_max) : 0.0f;
        run_sum[t] = run_sum[t] * rescale + WarpSum(prob);
        run_max[t] = new_max;
        prob_s[i * kChunk + lane] = prob;
        if (lane == 0) rescale_s[i] = rescale;
      }
    }
    __syncthreads();

    // acc = acc * rescale + P V over the chunk's keys (rows >= n of V are zeros, their p is 0).
#pragma unroll
    for (int i = 0; i < kHeadsPerCta; ++i) {
      if (i < nh) {
        const float r = rescale_s[i];
#pragma unroll
        for (int c = 0; c < kDimsPerThread; ++c) acc[i][c] *= r;
      }
    }
    const int n4 = (n + 3) & ~3;
    for (int j = 0; j < n4; j += 4) {
      float vx[4][kDimsPerThread];
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
#pragma unroll
        for (int c = 0; c < kDimsPerThread; ++c) {
          const int d = tid + c * kThreads;
          vx[jj][c] = d < p.dims_padded ? v_s[(j + jj) * p.dims_padded + d] : 0.0f;
        }
      }
#pragma unroll
      for (int i = 0; i < kHeadsPerCta; ++i) {
        if (i < nh) {
          const float4 pr = *reinterpret_cast<const float4*>(prob_s + i * kChunk + j);
#pragma unroll
          for (int c = 0; c < kDimsPerThread; ++c) {
            acc[i][c] += pr.x * vx[0][c] + pr.y * vx[1][c] + pr.z * vx[2][c] + pr.w * vx[3][c];
          }
        }
      }
    }
    // The offsets were last read by this chunk's load, before the barrier above.
    if (warp == 0 && c0 + kChunk < hi) ChunkBases<KvT>(p, table, c0 + kChunk, hi, g, base_s);
    __syncthreads();  // before the next chunk overwrites K, V and the probabilities
  }

#pragma unroll
  for (int t = 0; t < kHeadsPerWarp; ++t) {
    const int i = warp + t * kWarps;
    if (i < nh && lane == 0) {
      max_s[i] = run_max[t];
      sum_s[i] = run_sum[t];
    }
  }
  __syncthreads();

#pragma unroll
  for (int i = 0; i < kHeadsPerCta; ++i) {
    if (i >= nh) continue;
    const int h = head0 + i;
    if (p.splits == 1) {
      // sum >= 1: the row's own position is always visible.
      const float inv = 1.0f / sum_s[i];
      float* out = p.out + static_cast<int64_t>(row.q_row) * p.out_stride +
                   static_cast<int64_t>(h) * p.head_dim;
#pragma unroll
      for (int c = 0; c < kDimsPerThread; ++c) {
        const int d = tid + c * kThreads;
        if (d < p.head_dim) out[d] = acc[i][c] * inv;
      }
    } else {
      const int64_t part = (w * p.heads + h) * p.splits + split;
      float* part_acc = p.part_acc + part * p.head_dim;
#pragma unroll
      for (int c = 0; c < kDimsPerThread; ++c) {
        const int d = tid + c * kThreads;
        if (d < p.head_dim) part_acc[d] = acc[i][c];
      }
      if (tid == 0) {
        p.part_max[part] = max_s[i];  // -inf for an empty split (its sum and acc are 0)
        p.part_sum[part] = sum_s[i];
      }
    }
  }
}

// One CTA per (row, head): out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M), M = max_s m_s.
__global__ void __launch_bounds__(kCombineThreads) CombineSplitsKernel(const KernelParams p) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  __shared__ float weight_s[kPagedAttentionCudaMaxSplits];
  __shared__ float inv_total_s;
  const int64_t w = blockIdx.x / p.heads;
  const int h = static_cast<int>(blockIdx.x % p.heads);
  const int64_t part0 = (w * p.heads + h) * p.splits;
  if (threadIdx.x < 32) {
    float m = -INFINITY;
    for (int s = threadIdx.x; s < p.splits; s += 32) m = fmaxf(m, p.part_max[part0 + s]);
    m = WarpMax(m);  // finite: split 0 always holds the first key
    float total = 0.0f;
    for (int s = threadIdx.x; s < p.splits; s += 32) {
      const float weight = expf(p.part_max[part0 + s] - m);
      weight_s[s] = weight;
      total += weight * p.part_sum[part0 + s];
    }
    total = WarpSum(total);
    if (threadIdx.x == 0) inv_total_s = 1.0f / total;
  }
  __syncthreads();
  const PagedAttentionCudaRow row = p.rows[w];
  float* out =
      p.out + static_cast<int64_t>(row.q_row) * p.out_stride + static_cast<int64_t>(h) * p.head_dim;
  for (int d = threadIdx.x; d < p.head_dim; d += kCombineThreads) {
    float o = 0.0f;
    for (int s = 0; s < p.splits; ++s) o += weight_s[s] * p.part_acc[(part0 + s) * p.head_dim + d];
    out[d] = o * inv_total_s;
  }
}

}  // namespace

KernelStatus ValidatePagedAttentionCudaArgs(const PagedAttentionCudaArgs& a) {
  const PagedKv& kv = a.kv;
  if (kv.k == nullptr || kv.v == nullptr) return KernelStatus::kInvalidArgument;
  if (kv.dtype != KvDtype::kF32 && kv.dtype != KvDtype::kF16 && kv.dtype != KvDtype::kQ8_0) {
    return KernelStatus::kUnsupportedType;
  }
  if (kv.num_blocks <= 0 || kv.block_size <= 0 || kv.kv_heads <= 0 || kv.head_dim <= 0) {
    return KernelStatus::kInvalidArgument;
  }
  if (kv.head_dim > kMaxAttentionHeadDim) return KernelStatus::kTooLarge;
  // Q8_0: whole blocks per vector, and 2-byte aligned pages for the 16-bit loads.
  if (kv.dtype == KvDtype::kQ8_0 &&
      (KvVectorBytes(kv.dtype, kv.head_dim) == 0 || reinterpret_cast<uintptr_t>(kv.k) % 2 != 0 ||
       reinterpret_cast<uintptr_t>(kv.v) % 2 != 0)) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.heads <= 0 || a.heads % kv.kv_heads != 0 || a.window < 0 || a.n_rows < 0) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t width = a.heads * kv.head_dim;
  if (a.q == nullptr || a.out == nullptr || a.q_stride < width || a.out_stride < width ||
      !(a.scale > 0.0f)) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.n_rows > 0 && (a.rows == nullptr || a.block_tables == nullptr)) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.splits < 1 || a.splits > kPagedAttentionCudaMaxSplits) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.splits > 1 && (a.scratch == nullptr || reinterpret_cast<uintptr_t>(a.scratch) % 16 != 0 ||
                       a.scratch_bytes < PagedAttentionCudaScratchBytes(a.n_rows, a.heads,
                                                                        kv.head_dim, a.splits))) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t passes = (a.heads / kv.kv_heads + kHeadsPerCta - 1) / kHeadsPerCta;
  if (a.n_rows * kv.kv_heads * passes > 0x7FFFFFFF || a.n_rows * a.heads > 0x7FFFFFFF ||
      kv.block_size > 0x7FFFFFFF || kv.kv_heads > 0x7FFFFFFF) {
    return KernelStatus::kTooLarge;
  }
  return KernelStatus::kOk;
}

namespace {

template <typename KvT, int kDimsPerThread>
cudaError_t LaunchMain(const KernelParams& p, dim3 grid, size_t smem, cudaStream_t stream) {
  auto* kernel = &PagedAttentionKernel<KvT, kDimsPerThread>;
  if (smem > 48 * 1024) {  // beyond the default dynamic shared memory limit: opt in
    const cudaError_t err = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  LaunchWithPdl(kernel, grid, kThreads, smem, stream, p);
  return cudaGetLastError();
}

template <typename KvT>
cudaError_t LaunchForDims(const KernelParams& p, dim3 grid, size_t smem, cudaStream_t stream) {
  if (p.dims_padded <= kThreads) return LaunchMain<KvT, 1>(p, grid, smem, stream);
  if (p.dims_padded <= 2 * kThreads) return LaunchMain<KvT, 2>(p, grid, smem, stream);
  return LaunchMain<KvT, 4>(p, grid, smem, stream);  // head_dim <= kMaxAttentionHeadDim = 512
}

}  // namespace

KernelStatus PagedAttentionCuda(const PagedAttentionCudaArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidatePagedAttentionCudaArgs(a); s != KernelStatus::kOk) return s;
  if (a.n_rows == 0) return KernelStatus::kOk;
  const PagedKv& kv = a.kv;
  KernelParams p{};
  p.q = a.q;
  p.q_stride = a.q_stride;
  p.out = a.out;
  p.out_stride = a.out_stride;
  p.rows = a.rows;
  p.tables = a.block_tables;
  p.k_cache = kv.k;
  p.v_cache = kv.v;
  p.num_blocks = kv.num_blocks;
  p.block_size = static_cast<int>(kv.block_size);
  p.kv_heads = static_cast<int>(kv.kv_heads);
  p.head_dim = static_cast<int>(kv.head_dim);
  p.dims_padded = (p.head_dim + 3) / 4 * 4;
  // A float4 row stride that is an odd multiple of 4 floats spreads 8 lanes over all 32 banks.
  p.k_stride = (p.dims_padded / 4) % 2 == 1 ? p.dims_padded : p.dims_padded + 4;
  p.heads = static_cast<int>(a.heads);
  p.group = static_cast<int>(a.heads / kv.kv_heads);
  p.passes = (p.group + kHeadsPerCta - 1) / kHeadsPerCta;
  p.cta_heads = p.group < kHeadsPerCta ? p.group : kHeadsPerCta;
  p.window = a.window;
  p.scale = a.scale;
  p.splits = static_cast<int>(a.splits);
  const int vec_elems = kv.dtype == KvDtype::kF16 ? 8 : 4;
  // (The Q8_0 loader has its own access pattern and ignores this.)
  p.vector_loads = kv.head_dim % vec_elems == 0 && reinterpret_cast<uintptr_t>(kv.k) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(kv.v) % 16 == 0;
  if (a.splits > 1) {
    const int64_t partials = a.n_rows * a.heads * a.splits;
    p.part_acc = static_cast<float*>(a.scratch);
    p.part_max = p.part_acc + partials * kv.head_dim;
    p.part_sum = p.part_max + partials;
  }
  const size_t smem_floats =
      static_cast<size_t>(p.cta_heads) * p.dims_padded + static_cast<size_t>(kChunk) * p.k_stride +
      static_cast<size_t>(kChunk) * p.dims_padded + static_cast<size_t>(p.cta_heads) * kChunk +
      3 * kHeadsPerCta + 2 * kChunk;  // base_s: kChunk int64
  const size_t smem = smem_floats * sizeof(float);
  const dim3 grid(static_cast<unsigned>(a.n_rows * kv.kv_heads * p.passes),
                  static_cast<unsigned>(a.splits));
  cudaError_t err;
  switch (kv.dtype) {
    case KvDtype::kF16:
      err = LaunchForDims<__half>(p, grid, smem, stream);
      break;
    case KvDtype::kQ8_0:
      err = LaunchForDims<KvQ8>(p, grid, smem, stream);
      break;
    default:
      err = LaunchForDims<float>(p, grid, smem, stream);
      break;
  }
  if (err == cudaSuccess && a.splits > 1) {
    LaunchWithPdl(CombineSplitsKernel, static_cast<unsigned>(a.n_rows * a.heads), kCombineThreads,
                  0, stream, p);
    err = cudaGetLastError();
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
