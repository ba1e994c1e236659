// CUDA paged attention (paged_attention_cuda.h): the per-(row, KV head) online-softmax kernel, its
// split-K combine in the kernel's last CTA per (row, KV head), and the entry point. Chunk loaders:
// paged_attention_cuda_load.cuh; the combine's math: paged_attention_cuda_combine.cuh; the combine
// kernels of their own: paged_attention_cuda_combine_kernels.cuh; argument checks and launch
// planning: paged_attention_cuda_plan.cc; the tensor-core form (STEPSERVE_ATTN_MMA_DECODE):
// paged_attention_cuda_mma.cuh.
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
//   Single pass: out = acc / sum. Split-K: (acc, max, sum) go to scratch and are rescaled to the
//   common max either by the combine kernel (the default) or, fused, by the CTA that arrives last
//   at its (row, KV head[, pass]) counter: every CTA fences its partials and counts itself in
//   with an atomic; the one that sees splits - 1 earlier arrivals fences again, combines the
//   group's heads from all the partials and sets the counter back to 0 for the next launch.
#include <cuda_fp16.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "kernels/attention/paged_attention_cuda.h"
#include "kernels/attention/paged_attention_cuda_combine.cuh"
#include "kernels/attention/paged_attention_cuda_combine_kernels.cuh"
#include "kernels/attention/paged_attention_cuda_load.cuh"
#include "kernels/attention/paged_attention_cuda_mma.cuh"
#include "kernels/attention/paged_attention_cuda_params.cuh"
#include "kernels/common/arrival.cuh"
#include "kernels/common/cuda_reduce.cuh"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/sigmoid.cuh"
#include "kernels/matmul/q8_quantize.cuh"

namespace stepserve::kernels {
namespace {

using namespace paged_attention_cuda;  // NOLINT(build/namespaces): this file's own kernels
using cuda_reduce::WarpMax;
using cuda_reduce::WarpSum;

std::atomic<int64_t> g_combine_launches{0};
std::atomic<int64_t> g_mma_launches{0};

// Fused split-K combine, after a CTA has written its partials: the CTA that arrives last at the
// counter of its (row w, KV head[, pass]) combines heads head0 .. head0 + nh - 1 of that row from
// every split's partials and resets the counter. `area` (the K / V / probability area, free after
// the chunk loop; the host checks it holds 3 * cta_heads * splits floats) takes the (max, sum)
// pairs and the weights; `inv_s` holds nh floats.
__device__ __forceinline__ void CombineIfLast(const KernelParams& p, int64_t w, int head0, int nh,
                                              int q_row, float* area, float* inv_s) {
  // The CTA barrier orders every thread's partials before thread 0's release arrival
  // (kernels/common/arrival.cuh); in the last CTA, thread 0's acquire after the arrival and the
  // barrier order the other CTAs' partials before every thread's reads (through L2, __ldcg).
  __shared__ int last_s;
  __syncthreads();
  if (threadIdx.x == 0) {
    int* counter = p.arrivals + blockIdx.x;
    const bool last = ArriveRelease(counter) == p.splits - 1;
    if (last) {
      *counter = 0;  // every split has arrived: the next launch starts from zero
      AcquireAfterArrivals();
    }
    last_s = last;
  }
  __syncthreads();
  if (!last_s) return;
  const int entries = nh * p.splits;
  const int64_t part0 =
      (w * p.heads + head0) * p.splits;  // head i, split s: part0 + i * splits + s
  float* weight_s = area;
  float* max_s = area + entries;
  float* sum_s = max_s + entries;
  for (int e = threadIdx.x; e < entries; e += kThreads) {
    max_s[e] = __ldcg(p.part_max + part0 + e);
    sum_s[e] = __ldcg(p.part_sum + part0 + e);
  }
  __syncthreads();
  for (int i = threadIdx.x >> 5; i < nh; i += kWarps) {
    const int at = i * p.splits;
    const float inv_total = SplitWeights(max_s + at, sum_s + at, p.splits, weight_s + at);
    if ((threadIdx.x & 31) == 0) inv_s[i] = inv_total;
  }
  __syncthreads();
  float* out =
      p.out + static_cast<int64_t>(q_row) * p.out_stride + static_cast<int64_t>(head0) * p.head_dim;
  if (p.head_dim % 4 == 0) {
    CombineHeads<4>(p, part0, nh, weight_s, inv_s, out, threadIdx.x, kThreads);
  } else {
    CombineHeads<1>(p, part0, nh, weight_s, inv_s, out, threadIdx.x, kThreads);
  }
}

// kHeads: the query heads a CTA may hold (p.cta_heads <= kHeads), which bounds the unrolled
// per-head loops; 4 or 8 for the compact forms (CompactHeadsLevel), else kHeadsPerCta.
// kDimsPerThread: ceil(dims_padded / kThreads), the accumulator columns each thread owns; kDim:
// the head dim fixed at compile time, or 0 (Geometry); kEarly (EarlyLoadsEnabled): warp 0 loads
// the first chunk's page-table entries before the query rows instead of after them, and the query
// loads are unrolled, so those round trips overlap - the same values land in shared memory.
//
// p.tables_before_wait: the row and (kEarly) the first chunk's page-table entries are read before
// the programmatic-launch wait, while the kernel before (the rope and KV append) still runs; the
// query rows and the cache are read after it. At decode, two dependent round trips fewer on the
// step's critical path per layer.
template <typename KvT, int kDimsPerThread, int kDim, bool kEarly = false,
          int kHeads = kHeadsPerCta>
__global__ void __launch_bounds__(kThreads) PagedAttentionKernel(const KernelParams p) {
  static_assert(kHeads >= kWarps && kHeads <= kHeadsPerCta && kHeads % kWarps == 0);
  constexpr int kHeadsW = kHeads / kWarps;  // heads a warp scores
  if (!p.tables_before_wait) {
    WaitForPrimaryGrid();
    AllowDependentLaunch();
  }
  const Geometry<kDim> geo(p);
  extern __shared__ float4 smem4[];
  float* q_s = reinterpret_cast<float*>(smem4);      // [cta_heads][dims_padded]
  float* k_s = q_s + p.cta_heads * geo.dims_padded;  // [kChunk][k_stride]
  float* v_s = k_s + kChunk * geo.k_stride;          // [kChunk][dims_padded]
  float* prob_s = v_s + kChunk * geo.dims_padded;    // [cta_heads][kChunk]
  float* rescale_s = prob_s + p.cta_heads * kChunk;  // [kHeadsPerCta]
  float* max_s = rescale_s + kHeadsPerCta;           // [kHeadsPerCta]
  float* sum_s = max_s + kHeadsPerCta;               // [kHeadsPerCta]
  // [kChunk] cache offsets of the chunk's keys; 3 * kHeadsPerCta floats keep it 8-byte aligned.
  int64_t* base_s = reinterpret_cast<int64_t*>(sum_s + kHeadsPerCta);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  int pass, g;
  int64_t w;
  if constexpr (kDim > 0) {
    // 32-bit index math (the grid's x extent is below 2^31, host checks); the generic kernels
    // keep their 64-bit form (and register allocation: the 32-bit form spilled at 4 dims/thread).
    const unsigned cta = blockIdx.x;
    const unsigned cta_head = cta / static_cast<unsigned>(p.passes);
    pass = static_cast<int>(cta - cta_head * static_cast<unsigned>(p.passes));
    const unsigned w32 = cta_head / static_cast<unsigned>(p.kv_heads);
    g = static_cast<int>(cta_head - w32 * static_cast<unsigned>(p.kv_heads));
    w = w32;
  } else {
    const int64_t cta = blockIdx.x;
    pass = static_cast<int>(cta % p.passes);
    g = static_cast<int>((cta / p.passes) % p.kv_heads);
    w = cta / (static_cast<int64_t>(p.passes) * p.kv_heads);
  }
  const int split = blockIdx.y;
  const int head0 = g * p.group + pass * p.cta_heads;
  const int nh = min(p.cta_heads, p.group - pass * p.cta_heads);

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
  auto load_q = [&](int idx) {
    const int i = idx / geo.dims_padded;
    const int d = idx - i * geo.dims_padded;
    q_s[idx] = d < geo.head_dim ? q_row[static_cast<int64_t>(head0 + i) * geo.head_dim + d] : 0.0f;
  };
  if constexpr (kEarly) {
    if (warp == 0) ChunkBases<KvT>(p, geo, table, lo, hi, g, base_s);
    if (p.tables_before_wait) {
      WaitForPrimaryGrid();  // the query rows (and the cache's newest keys) come from before
      AllowDependentLaunch();
    }
#pragma unroll 4
    for (int idx = tid; idx < nh * geo.dims_padded; idx += kThreads) load_q(idx);
  } else {
    if (p.tables_before_wait) {
      WaitForPrimaryGrid();
      AllowDependentLaunch();
    }
    for (int idx = tid; idx < nh * geo.dims_padded; idx += kThreads) load_q(idx);
  }

  float run_max[kHeadsW];
  float run_sum[kHeadsW];
#pragma unroll
  for (int t = 0; t < kHeadsW; ++t) {
    run_max[t] = -INFINITY;
    run_sum[t] = 0.0f;
  }
  float acc[kHeads][kDimsPerThread];
#pragma unroll
  for (int i = 0; i < kHeads; ++i) {
#pragma unroll
    for (int c = 0; c < kDimsPerThread; ++c) acc[i][c] = 0.0f;
  }

  if constexpr (!kEarly) {
    if (warp == 0) ChunkBases<KvT>(p, geo, table, lo, hi, g, base_s);
  }
  __syncthreads();

  for (int64_t c0 = lo; c0 < hi; c0 += kChunk) {
    const int n = static_cast<int>(min(int64_t{kChunk}, hi - c0));
    LoadChunk<KvT>(p, geo, base_s, k_s, v_s);
    __syncthreads();
    // The next chunk's page-table entries, read now and turned into offsets after the P V sum
    // (base_s is free once the barrier above has passed): the table's round trip overlaps this
    // chunk's math instead of preceding the next chunk's K / V loads. A CTA of one chunk (short
    // contexts, many splits) skips it. Measured (H100, session 36, against an A/B build reading
    // the table after the sum): 16 streams at 4096 keys 12.967 / 12.970 against 12.994 / 12.998 ms
    // per step, 64 streams at 256 keys on par.
    const bool next_chunk = c0 + kChunk < hi;
    const int32_t next_page = warp == 0 && next_chunk ? ChunkPage(p, table, c0 + kChunk, hi) : -1;

    // Scores of key `lane` against this warp's heads, then the online-softmax update.
    float score[kHeadsW];
#pragma unroll
    for (int t = 0; t < kHeadsW; ++t) score[t] = 0.0f;
    const float* k_row = k_s + lane * geo.k_stride;
    for (int d = 0; d < geo.dims_padded; d += 4) {
      const float4 kv = *reinterpret_cast<const float4*>(k_row + d);
#pragma unroll
      for (int t = 0; t < kHeadsW; ++t) {
        const int i = warp + t * kWarps;
        if (i < nh) {
          const float4 qv = *reinterpret_cast<const float4*>(q_s + i * geo.dims_padded + d);
          score[t] += qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kHeadsW; ++t) {
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
    for (int i = 0; i < kHeads; ++i) {
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
          vx[jj][c] = d < geo.dims_padded ? v_s[(j + jj) * geo.dims_padded + d] : 0.0f;
        }
      }
#pragma unroll
      for (int i = 0; i < kHeads; ++i) {
        if (i < nh) {
          const float4 pr = *reinterpret_cast<const float4*>(prob_s + i * kChunk + j);
#pragma unroll
          for (int c = 0; c < kDimsPerThread; ++c) {
            acc[i][c] += pr.x * vx[0][c] + pr.y * vx[1][c] + pr.z * vx[2][c] + pr.w * vx[3][c];
          }
        }
      }
    }
    if (warp == 0 && next_chunk) {
      ChunkBasesFromPage<KvT>(p, geo, next_page, c0 + kChunk, hi, g, base_s);
    }
    __syncthreads();  // before the next chunk overwrites K, V and the probabilities
  }

#pragma unroll
  for (int t = 0; t < kHeadsW; ++t) {
    const int i = warp + t * kWarps;
    if (i < nh && lane == 0) {
      max_s[i] = run_max[t];
      sum_s[i] = run_sum[t];
    }
  }
  __syncthreads();

#pragma unroll
  for (int i = 0; i < kHeads; ++i) {
    if (i >= nh) continue;
    const int h = head0 + i;
    if (p.splits == 1) {
      // sum >= 1: the row's own position is always visible.
      const float inv = 1.0f / sum_s[i];
      float* out = p.out + static_cast<int64_t>(row.q_row) * p.out_stride +
                   static_cast<int64_t>(h) * geo.head_dim;
#pragma unroll
      for (int c = 0; c < kDimsPerThread; ++c) {
        const int d = tid + c * kThreads;
        if (d < geo.head_dim) out[d] = acc[i][c] * inv;
      }
    } else {
      const int64_t part = (w * p.heads + h) * p.splits + split;
      float* part_acc = p.part_acc + part * geo.head_dim;
#pragma unroll
      for (int c = 0; c < kDimsPerThread; ++c) {
        const int d = tid + c * kThreads;
        if (d < geo.head_dim) part_acc[d] = acc[i][c];
      }
      if (tid == 0) {
        p.part_max[part] = max_s[i];  // -inf for an empty split (its sum and acc are 0)
        p.part_sum[part] = sum_s[i];
      }
    }
  }
  if (p.arrivals != nullptr) CombineIfLast(p, w, head0, nh, row.q_row, k_s, rescale_s);
}

template <typename KvT, int kDimsPerThread, int kDim = 0, bool kEarly = false,
          int kHeads = kHeadsPerCta>
cudaError_t LaunchMain(const KernelParams& p, dim3 grid, size_t smem, cudaStream_t stream) {
  auto* kernel = &PagedAttentionKernel<KvT, kDimsPerThread, kDim, kEarly, kHeads>;
  if (smem > 48 * 1024) {  // beyond the default dynamic shared memory limit: opt in
    const cudaError_t err = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  LaunchWithPdl(kernel, grid, kThreads, smem, stream, p);
  return cudaGetLastError();
}

// The decode kernel's and the gated combine's early-load forms (PagedAttentionKernel<..., true>,
// CombineSplitsGateEarlyKernel) unless STEPSERVE_ATTN_EARLY_LOADS=0 (read once). Measured on the
// H200 (45 layers IQ4_XS, ms per step at 1 / 2 / 4 streams, two alternating pairs; session 18
// call 1): 4.668 / 6.583 / 9.627 and 4.662 / 6.547 / 9.624 without, 4.608 / 6.510 / 9.542 and
// 4.643 / 6.533 / 9.555 with.
bool EarlyLoadsEnabled() {
  static const bool on = EnvSwitchOn("STEPSERVE_ATTN_EARLY_LOADS");
  return on;
}

// PagedAttentionKernel's row and page-table reads before the PDL wait, unless
// STEPSERVE_ATTN_TABLES_BEFORE_WAIT=0 (read once; session 32).
bool TablesBeforeWaitEnabled() {
  static const bool on = EnvSwitchOn("STEPSERVE_ATTN_TABLES_BEFORE_WAIT");
  return on;
}

// Head dim 128 (Step-3.5-Flash, the tiny presets' larger layers) with its geometry fixed at
// compile time, unless STEPSERVE_ATTN_FIXED_DIMS=0 (read once).
bool FixedDimsEnabled() {
  static const bool on = EnvSwitchOn("STEPSERVE_ATTN_FIXED_DIMS");
  return on;
}

// The head_dim 128 early-load kernel compiled for fewer heads a CTA than kHeadsPerCta when a
// launch's CTAs hold that few: STEPSERVE_ATTN_COMPACT_HEADS (read once) 0 off, 1 a 4-head form
// (kHeads = 4; Step-3.5-Flash's full layers at batch 1: 8-head groups split in two), 2 (the
// default) also an 8-head form (its sliding-window layers' 12-head groups in passes of 6).
// Why: the 16-head form is ~4800 SASS instructions (76 KB), its chunk loop alone ~50 KB; at batch 1
// and short contexts each CTA runs one chunk, so nearly every instruction is fetched cold, and the
// kernel took ~12 us of the step after the kernel before it ended (H100 timeline, session 33)
// against a few round trips of work. Measured on the H100 (24 layers, session 34, ms per step at
// batch 1, alternating rounds): level 0 2.370 / 2.369 / 2.379, level 1 2.357 / 2.356 and 2.398 /
// 2.373 / 2.353 / 2.365, level 2 2.322 / 2.325 / 2.325 / 2.315 / 2.321 (the attention adding
// 9.4 us a sliding-window layer instead of 11.6, 8.5 a full one); 2-64 streams on par (within
// 0.5%); attention_cuda_test, step_graph_cuda_test and model_cuda_test pass at levels 1 and 2.
int CompactHeadsLevel() {
  static const int level = EnvSwitchLevel("STEPSERVE_ATTN_COMPACT_HEADS", 2);
  return level;
}

template <typename KvT>
cudaError_t LaunchForDims(const KernelParams& p, dim3 grid, size_t smem, cudaStream_t stream) {
  if (p.head_dim == 128 && FixedDimsEnabled()) {
    if (!EarlyLoadsEnabled()) return LaunchMain<KvT, 1, 128>(p, grid, smem, stream);
    const int compact = CompactHeadsLevel();
    if (p.cta_heads <= 4 && compact >= 1)
      return LaunchMain<KvT, 1, 128, true, 4>(p, grid, smem, stream);
    if (p.cta_heads <= 8 && compact >= 2)
      return LaunchMain<KvT, 1, 128, true, 8>(p, grid, smem, stream);
    return LaunchMain<KvT, 1, 128, true>(p, grid, smem, stream);
  }
  if (p.dims_padded <= kThreads) return LaunchMain<KvT, 1>(p, grid, smem, stream);
  if (p.dims_padded <= 2 * kThreads) return LaunchMain<KvT, 2>(p, grid, smem, stream);
  // head_dim <= kMaxAttentionHeadDim = 512
  return LaunchMain<KvT, 4>(p, grid, smem, stream);
}

template <typename KvT, int kDim>
cudaError_t LaunchMmaForGroup(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  if (p.group <= 8) {
    LaunchWithPdl(DecodeAttentionMmaKernel<KvT, kDim, 1>, grid, kThreads, 0, stream, p);
  } else {
    LaunchWithPdl(DecodeAttentionMmaKernel<KvT, kDim, 2>, grid, kThreads, 0, stream, p);
  }
  return cudaGetLastError();
}

// The tensor-core decode kernel (PagedAttentionCudaMmaSupports holds: F32 / F16 pages, head_dim
// 128 or 192, groups up to 16): one CTA per (row, KV head, split).
cudaError_t LaunchMma(const KernelParams& p, KvDtype dtype, dim3 grid, cudaStream_t stream) {
  const bool f16 = dtype == KvDtype::kF16;
  if (p.head_dim == 128) {
    return f16 ? LaunchMmaForGroup<__half, 128>(p, grid, stream)
               : LaunchMmaForGroup<float, 128>(p, grid, stream);
  }
  return f16 ? LaunchMmaForGroup<__half, 192>(p, grid, stream)
             : LaunchMmaForGroup<float, 192>(p, grid, stream);
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
  p.dims_padded = PaddedDims(p.head_dim);
  p.k_stride = KStride(p.dims_padded);
  p.heads = static_cast<int>(a.heads);
  p.group = static_cast<int>(a.heads / kv.kv_heads);
  p.cta_heads = p.group < kHeadsPerCta ? p.group : kHeadsPerCta;
  p.passes = (p.group + p.cta_heads - 1) / p.cta_heads;
  p.window = a.window;
  p.scale = a.scale;
  p.splits = static_cast<int>(a.splits);
  p.tables_before_wait = TablesBeforeWaitEnabled();
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
  // K, V and probabilities; after the chunk loop the fused combine's (max, sum) pairs and weights.
  const size_t loop_floats = static_cast<size_t>(kChunk) * p.k_stride +
                             static_cast<size_t>(kChunk) * p.dims_padded +
                             static_cast<size_t>(p.cta_heads) * kChunk;
  // The fused combine needs the caller's counters and room in that area for the (max, sum) pairs
  // and weights of its heads (only tiny head_dims lack it: 3 x 16 heads x 64 splits against
  // 32 keys x (k_stride + dims_padded + 16)).
  const bool fused = a.splits > 1 && a.split_arrivals != nullptr && a.gate == nullptr &&
                     PagedAttentionCudaFusedCombine() &&
                     3 * static_cast<size_t>(p.cta_heads) * a.splits <= loop_floats;
  const bool mma = !fused && !a.f32_math_only && PagedAttentionCudaMmaDecode() &&
                   PagedAttentionCudaMmaSupports(a);
  if (fused) {
    p.arrivals = a.split_arrivals;  // one counter per pass of up to kHeadsPerCta heads
  } else if (mma) {
    p.cta_heads = p.group;  // the whole group as the MMA's rows: one pass
    p.passes = 1;
  } else {
    p.cta_heads = static_cast<int>(
        PagedAttentionCudaCtaHeads(a.n_rows, p.group, p.kv_heads, a.splits, a.sm_count));
    p.passes = (p.group + p.cta_heads - 1) / p.cta_heads;
  }
  const size_t smem_floats = static_cast<size_t>(p.cta_heads) * p.dims_padded + loop_floats +
                             3 * kHeadsPerCta + 2 * kChunk;  // base_s: kChunk int64
  const size_t smem = smem_floats * sizeof(float);
  const dim3 grid(static_cast<unsigned>(a.n_rows * kv.kv_heads * p.passes),
                  static_cast<unsigned>(a.splits));
  cudaError_t err;
  if (mma) {
    err = LaunchMma(p, kv.dtype, grid, stream);
    if (err == cudaSuccess) g_mma_launches.fetch_add(1, std::memory_order_relaxed);
  } else {
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
  }
  if (err == cudaSuccess && a.splits > 1 && !fused) {
    g_combine_launches.fetch_add(1, std::memory_order_relaxed);
    const unsigned combine_ctas = static_cast<unsigned>(a.n_rows * a.heads);
    if (a.gate != nullptr) {
      GateEpilogue e{a.gate, a.gate_stride, {}};
      if (a.q8_natural != nullptr) {
        e.q8 = q8_quantize::MakeQ8Rows(a.q8_natural, a.q8_pair, a.heads * p.head_dim, a.q8_rows);
      }
      const int threads = (p.head_dim / 4 + 31) / 32 * 32;  // head_dim <= 512: <= 128
      LaunchWithPdl(EarlyLoadsEnabled() && a.splits <= kEarlyCombineSplits
                        ? CombineSplitsGateEarlyKernel
                        : CombineSplitsGateKernel,
                    combine_ctas, threads, 0, stream, p, e);
    } else {
      LaunchWithPdl(CombineSplitsKernel, combine_ctas, kCombineThreads, 0, stream, p);
    }
    err = cudaGetLastError();
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

int64_t PagedAttentionCudaCombineLaunches() {
  return g_combine_launches.load(std::memory_order_relaxed);
}

int64_t PagedAttentionCudaMmaLaunches() { return g_mma_launches.load(std::memory_order_relaxed); }

}  // namespace stepserve::kernels
