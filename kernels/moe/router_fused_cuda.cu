// The fused decode router (router_cuda.h RouterFusedCuda): router GEMV + expert selection in one
// launch.
//
// Why: at batch 1 the router was two kernels per MoE layer - the generic split-K GEMV over the
// 288 x 4096 F32 router matrix (4.7 MB) and the block-per-row selection - measured at ~10 us each
// (ncu, bench/gpu/results-h200-decode-kernels-v4.txt), ~20 us of a ~170 us layer. The GEMV ran at
// ~0.45 TB/s: each warp walked its 512 weights in dependent rounds, so the kernel was a few DRAM
// round trips plus its launch. Here:
//  - one CTA per expert loads its whole weight row into registers (one float4 per 512 weights per
//    thread) before WaitForPrimaryGrid: the weights are never written by a kernel, so with
//    programmatic dependent launch their DRAM round trip overlaps the kernel before (pdl.cuh);
//  - each CTA then dots the row with the (at most kRouterFusedMaxRows) activation rows, read from
//    L2, reduces in a fixed order (reproducible) and writes its logits;
//  - the last CTA to finish (atomicInc ticket: the counter wraps back to 0 on that CTA, so it is
//    ready for the next launch without a reset) runs the selection row by row: gates and scores
//    staged in shared memory, then every thread counts the experts that rank before each of its
//    own (stopping at top_k) - rank k < top_k is pick k. Same order and formulas as RouterKernel,
//    whose top_k rounds of warp-wide argmax are a serial chain of shuffles.
#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "kernels/common/cuda_reduce.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/moe/router_cuda.h"
#include "kernels/moe/router_select.cuh"

namespace stepserve::kernels {
namespace {

using cuda_reduce::kWarpSize;
using router_select::RanksBefore;
using router_select::SelectionScore;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kMaxRows = static_cast<int>(kRouterFusedMaxRows);
constexpr int kMaxExperts = static_cast<int>(kRouterFusedMaxExperts);
constexpr int kMaxTopK = static_cast<int>(kRouterCudaMaxTopK);
constexpr int kMaxVec = static_cast<int>(kRouterFusedMaxIn) / (4 * kThreads);  // float4s a thread
static_assert(kMaxExperts % kThreads == 0);

__device__ __forceinline__ float Dot4(float4 a, float4 b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}

constexpr int kExpertsPerThread = kMaxExperts / kThreads;

// Block-wide maximum / sum over the CTA (kThreads threads); `scratch` holds kWarps floats.
__device__ __forceinline__ float CtaMax(float v, float* scratch) {
  v = cuda_reduce::WarpMax(v);
  __syncthreads();
  if (threadIdx.x % kWarpSize == 0) scratch[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  float m = scratch[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, scratch[w]);
  return m;
}

__device__ __forceinline__ float CtaSum(float v, float* scratch) {
  v = cuda_reduce::WarpSum(v);
  __syncthreads();
  if (threadIdx.x % kWarpSize == 0) scratch[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  float s = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) s += scratch[w];
  return s;
}

// The selection for one row, by the whole CTA: gates and scores into shared memory, then each
// thread counts, for each of its experts, the experts that rank before it (stopping at top_k):
// an expert of rank k < top_k is pick k. Ranks are unique under the total order, so this equals
// RouterKernel's top_k rounds of argmax, without their serial chain of warp reductions.
__device__ void SelectRow(const RouterArgs& a, int64_t row, const float* logits, float* score,
                          float* pi, float* scratch, int* picked_id, float* picked_pi) {
  const int n = static_cast<int>(a.n_experts);
  const int top_k = static_cast<int>(a.top_k);
  float logit[kExpertsPerThread];
#pragma unroll
  for (int i = 0; i < kExpertsPerThread; ++i) {  // all loads first: one L2 round trip
    const int e = static_cast<int>(threadIdx.x) + i * kThreads;
    logit[i] = e < n ? __ldcg(logits + e) : -INFINITY;
  }
  float max = 0.0f, inv_sum = 1.0f;
  if (a.gating == GatingFunc::kSoftmax) {
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < kExpertsPerThread; ++i) m = fmaxf(m, logit[i]);
    max = CtaMax(m, scratch);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kExpertsPerThread; ++i) {
      const int e = static_cast<int>(threadIdx.x) + i * kThreads;
      if (e < n) sum += expf(logit[i] - max);
    }
    inv_sum = 1.0f / CtaSum(sum, scratch);
  }
#pragma unroll
  for (int i = 0; i < kExpertsPerThread; ++i) {
    const int e = static_cast<int>(threadIdx.x) + i * kThreads;
    if (e < n) {
      const float p = a.gating == GatingFunc::kSoftmax ? expf(logit[i] - max) * inv_sum
                                                       : 1.0f / (1.0f + expf(-logit[i]));
      pi[e] = p;
      score[e] = SelectionScore(p, a.bias != nullptr ? a.bias[e] : 0.0f);
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kExpertsPerThread; ++i) {
    const int e = static_cast<int>(threadIdx.x) + i * kThreads;
    if (e >= n) continue;
    const float mine = score[e];
    int rank = 0;
    for (int j = 0; j < n && rank < top_k; ++j) rank += RanksBefore(score[j], j, mine, e) ? 1 : 0;
    if (rank < top_k) {
      picked_id[rank] = e;
      picked_pi[rank] = pi[e];
    }
  }
  __syncthreads();
  // The selected gates summed in pick order, as the CPU kernel does.
  if (threadIdx.x < static_cast<unsigned>(top_k)) {
    float sum = 0.0f;
    for (int k = 0; k < top_k; ++k) sum += picked_pi[k];
    float factor = 1.0f;
    if (a.normalize) factor = 1.0f / (sum < kRouterNormFloor ? kRouterNormFloor : sum);
    if (a.scale != 0.0f && a.scale != 1.0f) factor *= a.scale;
    a.ids[row * a.top_k + threadIdx.x] = picked_id[threadIdx.x];
    a.weights[row * a.top_k + threadIdx.x] = picked_pi[threadIdx.x] * factor;
  }
}

__global__ void __launch_bounds__(kThreads)
    RouterFusedKernel(const __grid_constant__ RouterFusedArgs a) {
  __shared__ float partial[kWarps][kMaxRows];
  __shared__ bool is_last;
  __shared__ float score[kMaxExperts];
  __shared__ float pi[kMaxExperts];
  __shared__ float scratch[kWarps];
  __shared__ int picked_id[kMaxTopK];
  __shared__ float picked_pi[kMaxTopK];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int64_t e = blockIdx.x;
  const int nvec = static_cast<int>(a.in / 4);
  const int rows = static_cast<int>(a.select.rows);

  // The expert's weight row, before the wait: nothing in this stream writes the weights.
  const float4* wrow = reinterpret_cast<const float4*>(a.w + e * a.w_stride);
  float4 wv[kMaxVec];
#pragma unroll
  for (int i = 0; i < kMaxVec; ++i) {
    const int v = static_cast<int>(threadIdx.x) + i * kThreads;
    wv[i] = v < nvec ? __ldcs(wrow + v) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  WaitForPrimaryGrid();
  AllowDependentLaunch();

  for (int r = 0; r < rows; ++r) {
    const float4* xrow = reinterpret_cast<const float4*>(a.x + r * a.x_stride);
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i) {
      const int v = static_cast<int>(threadIdx.x) + i * kThreads;
      if (v < nvec) acc = Dot4(wv[i], xrow[v], acc);
    }
    acc = cuda_reduce::WarpSum(acc);
    if (lane == 0) partial[warp][r] = acc;
  }
  __syncthreads();
  if (threadIdx.x < static_cast<unsigned>(rows)) {
    float logit = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) logit += partial[w][threadIdx.x];
    a.logits[threadIdx.x * a.select.logits_stride + e] = logit;
    __threadfence();  // the logit is visible device-wide before this CTA's ticket is taken
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    is_last = atomicInc(a.ticket, gridDim.x - 1) == gridDim.x - 1;
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();  // every other CTA's logits (fenced before their tickets) are visible here
  for (int r = 0; r < rows; ++r) {
    SelectRow(a.select, r, a.logits + r * a.select.logits_stride, score, pi, scratch, picked_id,
              picked_pi);
  }
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

std::atomic<bool>& FusedSetting() {
  static std::atomic<bool> enabled{[] {
    const char* v = std::getenv("STEPSERVE_FUSED_ROUTER");
    return v != nullptr && v[0] == '1';
  }()};
  return enabled;
}

}  // namespace

bool RouterFusedCudaEnabled() { return FusedSetting().load(std::memory_order_relaxed); }

bool SetRouterFusedCuda(bool enabled) { return FusedSetting().exchange(enabled); }

bool RouterFusedCudaSupports(const RouterFusedArgs& a) {
  const RouterArgs& s = a.select;
  return s.rows >= 1 && s.rows <= kRouterFusedMaxRows && a.in >= 4 && a.in % 4 == 0 &&
         a.in <= kRouterFusedMaxIn && s.n_experts >= 1 && s.n_experts <= kRouterFusedMaxExperts &&
         s.top_k >= 1 && s.top_k <= kRouterCudaMaxTopK && Aligned16(a.x) && Aligned16(a.w) &&
         a.x_stride % 4 == 0 && a.w_stride % 4 == 0;
}

KernelStatus RouterFusedCuda(const RouterFusedArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateRouter(a.select); s != KernelStatus::kOk) return s;
  if (a.x == nullptr || a.w == nullptr || a.logits == nullptr || a.ticket == nullptr ||
      a.select.logits != a.logits || a.x_stride < a.in || a.w_stride < a.in) {
    return KernelStatus::kInvalidArgument;
  }
  if (!RouterFusedCudaSupports(a)) {
    return a.select.rows > kRouterFusedMaxRows || a.in > kRouterFusedMaxIn ||
                   a.select.n_experts > kRouterFusedMaxExperts ||
                   a.select.top_k > kRouterCudaMaxTopK
               ? KernelStatus::kTooLarge
               : KernelStatus::kInvalidArgument;
  }
  const cudaError_t err = LaunchWithPdl(
      RouterFusedKernel, static_cast<unsigned>(a.select.n_experts), kThreads, 0, stream, a);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
