// Logits row reductions on CUDA (logits_topk_cuda.h). Every entry is ranked by a 64-bit composite
// key: the high 32 bits are the float's order key (monotonic in the value; NaN -> 0, below -inf;
// -0.0 -> +0.0's key), the low 32 bits are 0xFFFFFFFF - id, so a larger composite is an earlier
// entry and all composites of a row are distinct. The top k is then the k largest composites,
// found by a radix select (8 bits a pass, from the top; it stops as soon as the bucket holding the
// k-th largest is taken whole, i.e. after the 4 value passes unless values tie across the
// boundary) and sorted by a bitonic sort. k = 1 (or no top output) takes a block max instead.
#include <cstdint>
#include <limits>

#include "kernels/common/cuda_reduce.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/sampling/logits_topk_cuda.h"

namespace stepserve::kernels {
namespace {

using cuda_reduce::kFullMask;
using cuda_reduce::kWarpSize;
using u64 = unsigned long long;

constexpr int kThreads = 256;  // ChooseDigit and the sort assume exactly this block size
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kChunk = static_cast<int>(kLogitsTopKChunk);
constexpr int kPerThread = kChunk / kThreads;
static_assert(kChunk % kThreads == 0);
// Survivors per thread that the row CTA keeps in registers: 32 chunks of k = 256 (vocab 131072).
constexpr int kCombineItems = 32;
constexpr int kCombineItemsFew = 8;  // up to 2048 survivors: k <= 64 at vocab 128896
static_assert(kLogitsTopKMaxK <= kThreads, "one sort slot per thread");
constexpr uint32_t kNegInfKey = 0x007FFFFFu;  // OrderKey(-inf)

struct Params {
  const float* logits;
  int64_t row_stride;
  int32_t vocab;
  int32_t k;       // survivors per chunk and per row: args.k, or 1 when no top output is wanted
  int32_t out_k;   // slots per row in top_ids / top_logits (args.k)
  int32_t chunks;  // per row
  u64* cand;       // [rows][chunks][k] composites (a partial last chunk fills fewer)
  float2* stats;   // [rows][chunks]: (chunk max, sum of exp(x - chunk max))
  int32_t* top_ids;
  float* top_logits;
  int32_t* argmax;
  float* row_max;
  float* log_sum_exp;
};

__device__ __forceinline__ uint32_t OrderKey(float v) {
  uint32_t u = __float_as_uint(v);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0u;  // NaN ranks below everything
  if (u == 0x80000000u) u = 0u;                    // -0.0 ties with +0.0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ u64 Composite(uint32_t key, uint32_t id) {
  return (u64{key} << 32) | u64{0xFFFFFFFFu - id};
}

__device__ __forceinline__ int32_t CompositeId(u64 c) {
  return static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(c));
}

__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  v = cuda_reduce::WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kWarps ? scratch[lane] : -INFINITY;
  return cuda_reduce::WarpMax(v);
}

__device__ __forceinline__ double BlockSumDouble(double v, double* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kWarps ? scratch[lane] : 0.0;
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

struct SelectShared {
  int hist[256];
  int warp_sums[kWarps];
  u64 warp_max[kWarps];
  u64 prefix;  // the selected set is {c : (c & mask) >= prefix}
  u64 mask;
  int remaining;  // how many of the bucket `prefix` still belong to the top k
  int done;
  int count;  // gather cursor
};

__device__ __forceinline__ u64 BlockMaxU64(u64 v, SelectShared& sh) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  for (int o = kWarpSize / 2; o > 0; o >>= 1) {
    const u64 other = __shfl_xor_sync(kFullMask, v, o);
    v = other > v ? other : v;
  }
  __syncthreads();
  if (lane == 0) sh.warp_max[warp] = v;
  __syncthreads();
  v = sh.warp_max[0];
  for (int w = 1; w < kWarps; ++w) v = sh.warp_max[w] > v ? sh.warp_max[w] : v;
  return v;
}

// After a histogram pass of digit `shift`: bins in descending order, one per thread; the thread
// whose bin holds the rem-th largest remaining composite narrows the prefix to it.
__device__ __forceinline__ void ChooseDigit(SelectShared& sh, int shift, int rem) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int bin = 255 - static_cast<int>(threadIdx.x);
  const int h = sh.hist[bin];
  int cum = h;
  for (int o = 1; o < kWarpSize; o <<= 1) {
    const int up = __shfl_up_sync(kFullMask, cum, o);
    if (lane >= o) cum += up;
  }
  if (lane == kWarpSize - 1) sh.warp_sums[warp] = cum;
  __syncthreads();
  for (int w = 0; w < warp; ++w) cum += sh.warp_sums[w];
  const int above = cum - h;
  if (above < rem && rem <= cum) {
    sh.prefix |= u64(bin) << shift;
    sh.mask |= u64{0xFF} << shift;
    sh.remaining = rem - above;
    sh.done = h == rem - above;
  }
  __syncthreads();
}

// Radix select of the min(k, n) largest of n composites. Thread t's candidates are get(it) for
// it < iters (element it * kThreads + t), 0 where there is none (no real composite is 0: its low
// half is 0xFFFFFFFF - id > 0). kIters > 0 fixes the count at compile time so the caller's
// register array stays in registers; kIters == 0 takes runtime_iters (reads through `get`). On
// return (every thread) the selected ones are exactly {c != 0 : (c & sh.mask) >= sh.prefix}.
// Resets sh.count to 0.
template <int kIters, typename Get>
__device__ void RadixSelect(int runtime_iters, int n, int k, Get get, SelectShared& sh) {
  const int iters = kIters > 0 ? kIters : runtime_iters;
  if (threadIdx.x == 0) {
    sh.prefix = 0;
    sh.mask = 0;
    sh.remaining = k;
    sh.done = n <= k;
    sh.count = 0;
  }
  __syncthreads();
  for (int shift = 56; shift >= 0; shift -= 8) {
    if (sh.done) break;  // uniform: written before the last barrier
    const u64 prefix = sh.prefix;
    const u64 mask = sh.mask;
    const int rem = sh.remaining;
    sh.hist[threadIdx.x] = 0;
    __syncthreads();
#pragma unroll
    for (int it = 0; it < iters; ++it) {
      const u64 c = get(it);
      const int bin = c != 0 && (c & mask) == prefix ? static_cast<int>((c >> shift) & 0xFF) : -1;
      // Plain shared atomics: measured faster on the H200 than aggregating equal bins of a warp
      // with __match_any_sync first, and no slower than per-lane histogram copies.
      if (bin >= 0) atomicAdd(&sh.hist[bin], 1);
    }
    __syncthreads();
    ChooseDigit(sh, shift, rem);
  }
}

// Calls store(slot, composite) for every selected composite, slots 0.. in no particular order.
template <int kIters, typename Get, typename Store>
__device__ void GatherSelected(int runtime_iters, Get get, SelectShared& sh, Store store) {
  const int lane = threadIdx.x % kWarpSize;
  const int iters = kIters > 0 ? kIters : runtime_iters;
  const u64 prefix = sh.prefix;
  const u64 mask = sh.mask;
#pragma unroll
  for (int it = 0; it < iters; ++it) {
    const u64 c = get(it);
    const bool selected = c != 0 && (c & mask) >= prefix;
    const unsigned ballot = __ballot_sync(kFullMask, selected);
    if (ballot == 0) continue;
    int base = 0;
    if (lane == 0) base = atomicAdd(&sh.count, __popc(ballot));
    base = __shfl_sync(kFullMask, base, 0);
    if (selected) store(base + __popc(ballot & ((1u << lane) - 1u)), c);
  }
}

// Sorts kThreads composites in shared memory, largest first.
__device__ void BitonicSortDescending(u64* s) {
  const int i = static_cast<int>(threadIdx.x);
  for (int size = 2; size <= kThreads; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      const int j = i ^ stride;
      if (j > i) {
        const u64 a = s[i];
        const u64 b = s[j];
        const bool descending = (i & size) == 0;
        if ((a < b) == descending) {
          s[i] = b;
          s[j] = a;
        }
      }
    }
  }
  __syncthreads();
}

// One CTA per (row, chunk): stats and the chunk's top min(k, len) composites.
__global__ void __launch_bounds__(kThreads) LogitsChunkKernel(Params p) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  __shared__ SelectShared sh;
  __shared__ float red[kWarpSize];
  const int64_t row = blockIdx.x / p.chunks;
  const int start = static_cast<int>(blockIdx.x % p.chunks) * kChunk;
  const int len = min(kChunk, p.vocab - start);
  const float* x = p.logits + row * p.row_stride + start;

  float v[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = j * kThreads + static_cast<int>(threadIdx.x);
    v[j] = i < len ? x[i] : __int_as_float(0x7FC00000);  // NaN: ignored below
  }
  float m = -INFINITY;
  u64 items[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = j * kThreads + static_cast<int>(threadIdx.x);
    items[j] = i < len ? Composite(OrderKey(v[j]), static_cast<uint32_t>(start + i)) : 0;
    m = fmaxf(m, v[j]);  // fmaxf drops NaN
  }
  m = BlockMax(m, red);
  float s = 0.0f;
  if (m > -INFINITY && m < INFINITY) {
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      if (v[j] > -INFINITY) s += expf(v[j] - m);  // false for NaN
    }
  }
  s = cuda_reduce::BlockSum(s, red);
  if (threadIdx.x == 0) p.stats[blockIdx.x] = make_float2(m, m == INFINITY ? 1.0f : s);

  u64* out = p.cand + u64{blockIdx.x} * p.k;
  if (p.k == 1) {
    u64 best = 0;  // below every real composite
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) best = items[j] > best ? items[j] : best;
    best = BlockMaxU64(best, sh);
    if (threadIdx.x == 0) out[0] = best;
    return;
  }
  auto get = [&](int j) { return items[j]; };
  RadixSelect<kPerThread>(0, len, p.k, get, sh);
  GatherSelected<kPerThread>(0, get, sh, [&](int slot, u64 c) { out[slot] = c; });
}

// The row CTA's selection with its n <= kItems * kThreads candidates loaded into registers once.
template <int kItems, typename Store>
__device__ void SelectInRegisters(const u64* cand, int n, int k, SelectShared& sh, Store store) {
  u64 items[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int i = j * kThreads + static_cast<int>(threadIdx.x);
    items[j] = i < n ? cand[i] : 0;
  }
  auto get = [&](int j) { return items[j]; };
  RadixSelect<kItems>(0, n, k, get, sh);
  GatherSelected<kItems>(0, get, sh, store);
}

// One CTA per row: merges the chunks' survivors and stats into the row's outputs.
__global__ void __launch_bounds__(kThreads) LogitsCombineKernel(Params p) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  __shared__ SelectShared sh;
  __shared__ u64 top[kThreads];
  __shared__ float red[kWarpSize];
  __shared__ double red_double[kWarpSize];
  const int64_t row = blockIdx.x;
  const float* x = p.logits + row * p.row_stride;
  const int t = static_cast<int>(threadIdx.x);

  if (p.log_sum_exp != nullptr) {
    const float2* stats = p.stats + row * p.chunks;
    float m = -INFINITY;
    for (int c = t; c < p.chunks; c += kThreads) m = fmaxf(m, stats[c].x);
    m = BlockMax(m, red);
    double s = 0.0;
    if (m > -INFINITY && m < INFINITY) {
      for (int c = t; c < p.chunks; c += kThreads) {
        const float2 st = stats[c];
        if (st.x > -INFINITY) s += double{st.y} * exp(double{st.x} - double{m});
      }
    }
    s = BlockSumDouble(s, red_double);
    if (t == 0) {
      p.log_sum_exp[row] =
          m == -INFINITY || m == INFINITY ? m : static_cast<float>(double{m} + log(s));
    }
  }

  const u64* cand = p.cand + static_cast<u64>(row) * p.chunks * p.k;
  const int last_len = p.vocab - (p.chunks - 1) * kChunk;
  const int n = (p.chunks - 1) * p.k + min(p.k, last_len);
  if (p.k == 1) {
    u64 best = 0;
    for (int i = t; i < n; i += kThreads) best = cand[i] > best ? cand[i] : best;
    best = BlockMaxU64(best, sh);
    if (t == 0) top[0] = best;
    __syncthreads();
  } else {
    top[t] = 0;  // padding sorts last
    auto store = [&](int slot, u64 c) { top[slot] = c; };
    if (n <= kCombineItemsFew * kThreads) {  // small k: candidates held in registers
      SelectInRegisters<kCombineItemsFew>(cand, n, p.k, sh, store);
    } else if (n <= kCombineItems * kThreads) {
      SelectInRegisters<kCombineItems>(cand, n, p.k, sh, store);
    } else {  // read through L2 every pass
      auto get = [&](int it) {
        const int i = it * kThreads + t;
        return i < n ? cand[i] : u64{0};
      };
      const int iters = (n + kThreads - 1) / kThreads;
      RadixSelect<0>(iters, n, p.k, get, sh);
      GatherSelected<0>(iters, get, sh, store);
    }
    BitonicSortDescending(top);
  }

  const int kout = min(p.k, p.vocab);
  if (t < kout) {
    const int32_t id = CompositeId(top[t]);
    if (p.top_ids != nullptr) p.top_ids[row * p.out_k + t] = id;
    if (p.top_logits != nullptr) p.top_logits[row * p.out_k + t] = x[id];
  }
  if (t == 0) {
    const bool above_neg_inf = (top[0] >> 32) > kNegInfKey;
    const int32_t best = above_neg_inf ? CompositeId(top[0]) : 0;
    if (p.argmax != nullptr) p.argmax[row] = best;
    if (p.row_max != nullptr) p.row_max[row] = above_neg_inf ? x[best] : -INFINITY;
  }
}

int64_t ChunksPerRow(int64_t vocab) { return (vocab + kChunk - 1) / kChunk; }

}  // namespace

size_t LogitsTopKCudaScratchBytes(int64_t rows, int64_t vocab, int32_t k) {
  if (rows <= 0 || vocab <= 0 || k <= 0) return 0;
  return static_cast<size_t>(rows) * static_cast<size_t>(ChunksPerRow(vocab)) *
         (sizeof(u64) * static_cast<size_t>(k) + sizeof(float2));
}

KernelStatus LogitsTopKCuda(const LogitsTopKArgs& a, void* scratch, size_t scratch_bytes,
                            cudaStream_t stream) {
  if (KernelStatus s = ValidateLogitsTopK(a); s != KernelStatus::kOk) return s;
  if (a.rows == 0) return KernelStatus::kOk;
  if (scratch == nullptr || scratch_bytes < LogitsTopKCudaScratchBytes(a.rows, a.vocab, a.k) ||
      reinterpret_cast<uintptr_t>(scratch) % alignof(u64) != 0) {
    return KernelStatus::kInvalidArgument;
  }
  const bool want_top = a.top_ids != nullptr || a.top_logits != nullptr;
  if (!want_top && a.argmax == nullptr && a.row_max == nullptr && a.log_sum_exp == nullptr) {
    return KernelStatus::kOk;
  }
  const int64_t chunks = ChunksPerRow(a.vocab);
  const int64_t chunk_blocks = a.rows * chunks;
  if (chunk_blocks > std::numeric_limits<int32_t>::max()) return KernelStatus::kTooLarge;
  Params p{};
  p.logits = a.logits;
  p.row_stride = a.row_stride;
  p.vocab = static_cast<int32_t>(a.vocab);
  p.k = want_top ? a.k : 1;
  p.out_k = a.k;
  p.chunks = static_cast<int32_t>(chunks);
  p.cand = static_cast<u64*>(scratch);
  p.stats = reinterpret_cast<float2*>(p.cand + chunk_blocks * p.k);
  p.top_ids = a.top_ids;
  p.top_logits = a.top_logits;
  p.argmax = a.argmax;
  p.row_max = a.row_max;
  p.log_sum_exp = a.log_sum_exp;
  LaunchWithPdl(LogitsChunkKernel, static_cast<unsigned>(chunk_blocks), kThreads, 0, stream, p);
  LaunchWithPdl(LogitsCombineKernel, static_cast<unsigned>(a.rows), kThreads, 0, stream, p);
  if (cudaGetLastError() != cudaSuccess) return KernelStatus::kInvalidArgument;
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
